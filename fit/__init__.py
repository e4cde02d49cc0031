"""The scripts that fit what the engine learns from the development sets, each run from the
repository root as `python -m fit.<name>` (docs/evaluation.md)."""
