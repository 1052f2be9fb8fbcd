"""Benchmarks: figures, not pass/fail (run with `make bench` or `python -m bench.<name>`)."""
