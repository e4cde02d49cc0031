"""When retrieval_evaluation runs: after any change of the index, once the ingestion run is over,
and nightly; and the sensor that evaluates that condition from the moment `kb up` starts."""

import dagster as dg

__all__ = ["EVALUATION_AUTOMATION", "EVALUATION_SENSOR", "NIGHTLY_CRON"]

NIGHTLY_CRON = "0 3 * * *"  # 03:00 UTC (12:00 JST), away from office-hours ingestion

# After any document of the index changed (once the ingestion run is over), and nightly even
# when nothing changed: the nightly run catches drift from outside the index (synonyms,
# thresholds, a new question set).
EVALUATION_AUTOMATION = (
    (
        dg.AutomationCondition.newly_missing()
        | dg.AutomationCondition.any_deps_updated()
        | dg.AutomationCondition.cron_tick_passed(NIGHTLY_CRON)
    ).since_last_handled()
    & ~dg.AutomationCondition.any_deps_in_progress()
    & ~dg.AutomationCondition.in_progress()
).with_label(f"after an index change, and nightly ({NIGHTLY_CRON} UTC)")

# Dagster's default automation sensor starts STOPPED; this one runs as soon as `kb up` starts
# the daemon, so the condition above is actually evaluated.
EVALUATION_SENSOR = dg.AutomationConditionSensorDefinition(
    "evaluation_automation",
    target=dg.AssetSelection.assets("retrieval_evaluation"),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=60,
)
