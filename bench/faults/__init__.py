"""The fault-injection benchmark (issue 4): `python -m bench.faults [--quick] [--jobs N] [--out DIR]`.

Importing it registers the healthy-only programs of ``bench.healthy`` in the scenario table, so the matrix holds
their healthy controls."""

import bench.healthy  # noqa: F401  (registers the healthy-only programs)
