"""Evaluation: retrieval_evaluation (assets.py), the checks it reports (checks.py), and when it
runs (sensors.py)."""
