# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
"""knowledge_gaps: the knowledge-gap report of the past week, in figures. Questions can tell what
only their askers' groups may know, and the Dagster UI shows everything to everyone who opens
it: the questions themselves are read with `kb gaps` and, by reviewers, on the page."""

import dagster as dg

from kb_pipeline.defs.resources import (
    EmbedderResource,
    EngineResource,
    PostgresResource,
    RerankerResource,
)
from kb_search import open_knowledge_base

__all__ = ["WEEK", "knowledge_gaps"]

WEEK = 7  # days each materialization counts, so the plotted figures are week by week


@dg.asset(kinds={"python", "postgres"}, group_name="knowledge_gaps")
def knowledge_gaps(postgres: PostgresResource, embedder: EmbedderResource,
                   reranker: RerankerResource, engine: EngineResource) -> dg.MaterializeResult:
    """What employees asked this past week that no document answered (whole or a part), or whose
    answer they marked unhelpful, counted by topic; documents cited though unchanged for over a
    year; documents no answer cited. Counts only: `kb gaps` and the reviewers' page show the
    questions and documents."""
    settings = engine.settings(postgres, embedder, reranker)
    with open_knowledge_base(settings, connections=1, answers=False) as kb:
        report = kb.gaps.report(None, WEEK)
    return dg.MaterializeResult(metadata={
        **report.counts(), "days": WEEK,
        "since": dg.MetadataValue.timestamp(report.since),
        "largest_topic": max((t.asked for t in report.topics), default=0),
    })
