"""Evaluation above the engine's face: the question sets, the retrieval and answer metrics, a
set run through `KnowledgeBase` (`kb eval`, the Dagster evaluation of the live index and of a
rebuilt generation), the reports, the faithfulness judge, and the fitters of what the engine
learns from the development sets (`python -m kb_eval.fit NAME`, docs/evaluation.md)."""
