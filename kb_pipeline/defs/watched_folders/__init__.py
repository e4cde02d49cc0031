"""Watched folders: the sensor (sensors.py) that brings their new, edited and deleted files into
the index by ingestion runs and, after a pipeline change, by a gated rebuild of a generation;
it stands above both domains it launches runs of."""
