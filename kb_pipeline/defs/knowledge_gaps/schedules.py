"""When knowledge_gaps runs: every Monday before the office opens, from the moment `kb up`
starts the daemon."""

import dagster as dg

from kb_pipeline.defs.knowledge_gaps.assets import knowledge_gaps

__all__ = ["KNOWLEDGE_GAPS_SCHEDULE"]

KNOWLEDGE_GAPS_SCHEDULE = dg.ScheduleDefinition(
    name="weekly_knowledge_gaps",
    cron_schedule="0 6 * * 1",
    execution_timezone="Asia/Tokyo",
    job=dg.define_asset_job("knowledge_gap_report", selection=[knowledge_gaps],
                            description="Count the past week's knowledge gaps."),
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
