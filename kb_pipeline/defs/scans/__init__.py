"""Scans: the OCR step (assets.py) and the read_scans job (jobs.py) the folder sensor launches
for documents whose pages wait for it; ingestion then takes them from the OCR cache."""
