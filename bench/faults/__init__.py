"""The fault-injection benchmark (issue 4): `python -m bench.faults [--quick] [--jobs N] [--out DIR]`."""
