"""The weekly knowledge-gap report: its counts in the Dagster UI, never its questions."""
