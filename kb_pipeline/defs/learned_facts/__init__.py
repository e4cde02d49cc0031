"""Learned facts: approved corrections in the Dagster UI (assets.py), the job that indexes them
(jobs.py) and the sensor that launches it when corrections change (sensors.py)."""
