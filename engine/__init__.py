"""The pipeline stages: telemetry, capture, diagnose, infer, suggest, tune, prevent."""
