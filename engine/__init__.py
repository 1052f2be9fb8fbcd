"""The pipeline stages, in the order they may import each other: telemetry, capture, diagnose, infer, suggest,
tune, contribute, prevent, report (``tests/test_architecture.py`` holds that order; ``query/`` sits between
suggest and tune)."""
