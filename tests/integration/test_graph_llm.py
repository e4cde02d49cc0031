"""The LLM entity extractor (KB_GRAPH_LLM) through real ingestion: the real SDKs against a fake
provider on 127.0.0.1, real Dagster runs, the real database. What the model says a passage
names lands with its descriptions, what the passage does not name does not; a passage is sent
once per model and prompt, rebuilds included; a failing provider costs the model's part of the
graph, never a document; and KB_LLM alone sends nothing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import dagster as dg
import pytest

from kb_core.embeddings import make_embedder
from kb_core.entities import entities_of, name_candidates
from kb_core.generations import rebuild_needed
from kb_core.queries import query
from kb_core.settings import Settings
from kb_pipeline.in_process import ingest_paths, rebuild_in_process
from kb_pipeline.stages import pipeline_version
from kb_search.entity_cards import entity_card
from kb_search.graph import graph_leg
from tests.fake_servers import fake_server

CORPUS = {
    "QC-2031_報告書.md": "# 品質検査報告書 QC-2031\n\nZP-2041のギヤハウジングで寸法不良。"
                         "対象ロットは湖西工場で製造した。",
    "組織図.md": "# 組織図\n\n## 工場と品質責任者\n\n| 拠点 | 品質責任者 |\n|---|---|\n"
                "| 湖西工場 | 杉本 亮介 |\n| 本社工場 | 北村 由美 |\n",
    "取扱説明書.md": "# ZP-2041 取扱説明書\n\nギヤが摩耗したら交換してください。",
}
GROUPS = ["all-employees"]
# What the fake model says of a passage that writes the name; and of every passage, a factory
# no passage names, which must never reach the index.
SAID = {"杉本 亮介": ("person", "湖西工場の品質責任者"),
        "ギヤハウジング": ("product", "ZP-2041の部品。寸法不良が見つかった"),
        "湖西工場": ("unit", "QC-2031の対象ロットを製造した工場")}
RELATIONS = [("杉本 亮介", "湖西工場", "湖西工場の品質責任者を務める"),
             ("ギヤハウジング", "ZP-2041", "ZP-2041の部品"),
             ("幻影工場", "QC-2031", "QC-2031を製造した")]
PATHS = {"claude": "/v1/messages", "openai": "/v1/chat/completions"}


def extraction_of(passage: str) -> str:
    entities = [{"name": name, "kind": kind, "description": description}
                for name, (kind, description) in SAID.items() if name in passage]
    entities.append({"name": "幻影工場", "kind": "unit", "description": "架空の工場"})
    relations = [{"source": s, "target": t, "description": d} for s, t, d in RELATIONS]
    return "```json\n" + json.dumps({"entities": entities, "relations": relations},
                                    ensure_ascii=False) + "\n```"


def passage_of(body: dict) -> str:
    return body["messages"][-1]["content"]


def claude_reply(body: dict) -> tuple[int, dict]:
    return 200, {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                 "content": [{"type": "text", "text": extraction_of(passage_of(body))}],
                 "stop_reason": "end_turn", "stop_sequence": None,
                 "usage": {"input_tokens": 10, "output_tokens": 10}}


def openai_reply(body: dict) -> tuple[int, dict]:
    return 200, {"id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                 "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop", "message": {
                     "role": "assistant", "content": extraction_of(passage_of(body))}}],
                 "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}


REPLIES = {"claude": claude_reply, "openai": openai_reply}


def point_at(monkeypatch: pytest.MonkeyPatch, provider: str, url: str) -> None:
    if provider == "claude":
        monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    else:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")


def configured(settings: Settings) -> Settings:
    """`settings` with the extractor the environment names, as `kb ingest` reads it."""
    return dataclasses.replace(settings, graph_llm=Settings.from_env().graph_llm)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "all"
    root.mkdir()
    for name, text in CORPUS.items():
        (root / name).write_text(text, encoding="utf-8")
    (root / "_access.toml").write_text('groups = ["all-employees"]\n', encoding="utf-8")
    return root


def graph_metadata(instance: dg.DagsterInstance) -> dict[str, object]:
    event = instance.get_latest_materialization_event(dg.AssetKey("entity_graph"))
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def passages(conn, schema: str = "public") -> int:
    return conn.execute(f"SELECT count(*) FROM {schema}.chunks").fetchone()[0]


def described(conn, schema: str = "public") -> dict[str, tuple[str, str]]:
    return {key: (kind, description) for key, kind, description in conn.execute(
        f"SELECT entity_key, kind, description FROM {schema}.mentions "
        "WHERE description IS NOT NULL")}


def stated(conn, schema: str = "public") -> set[tuple[str, str, str]]:
    return set(conn.execute(f"SELECT source_key, target_key, description FROM {schema}.relations "
                            "WHERE kind = 'llm'").fetchall())


def leg_paths(conn, question: str, groups: list[str], names: bool = True) -> list[str]:
    """The files of the graph leg's passages for `question`, as a search plans it, the names
    the question writes looked up too unless not `names`."""
    readable, _, _, things = conn.execute(query("search_scope"), {
        "groups": groups, "terms": [], "exact_passages": 5000,
        "names": "\x1f".join(name_candidates(question) if names else [])}).fetchone()
    found = graph_leg(conn, entities_of(question), things, groups, readable, False, 50)
    files = dict(conn.execute("SELECT c.id, d.path FROM chunks c "
                              "JOIN documents d ON d.id = c.document_id"))
    return [Path(files[chunk_id]).name for chunk_id, _ in found]


@pytest.mark.parametrize("provider", ["claude", "openai"])
def test_what_the_model_reads_in_a_passage_lands_with_descriptions_and_is_asked_once(
        provider, settings, instance, conn, folder, monkeypatch):
    with fake_server({PATHS[provider]: REPLIES[provider]}) as fake:
        point_at(monkeypatch, provider, fake.url)
        monkeypatch.setenv("KB_GRAPH_LLM", provider)
        settings = configured(settings)
        summary = ingest_paths([folder], None, settings, instance)
        assert (summary.ingested, summary.failed) == (len(CORPUS), [])
        asked = len(fake.requests)
        assert asked == passages(conn)
        metadata = graph_metadata(instance)
        assert (metadata["llm_extracted"], metadata["llm_failed"]) == (asked, 0)
        assert metadata["llm_dropped"] == asked  # the factory no passage names, each time

        said = described(conn)
        assert said["杉本亮介"] == ("thing", "湖西工場の品質責任者")
        assert said["ギヤハウジング"][0] == "thing"
        assert said["湖西工場"] == ("unit", "QC-2031の対象ロットを製造した工場")
        assert conn.execute("SELECT count(*) FROM mentions WHERE entity_key = '幻影工場'"
                            ).fetchone()[0] == 0
        assert stated(conn) == {("杉本亮介", "湖西工場", "湖西工場の品質責任者を務める"),
                                ("ギヤハウジング", "zp-2041", "ZP-2041の部品")}
        card = entity_card(conn, "杉本 亮介", GROUPS)
        assert [p.description for d in card.documents for p in d.passages] == [
            "湖西工場の品質責任者"]
        related = {r.id: r for r in card.relations}
        assert related["湖西工場"].descriptions == ["湖西工場の品質責任者を務める"]
        assert "llm" in related["湖西工場"].references
        assert entity_card(conn, "杉本 亮介", ["hr"]) is None

        # A question naming what only the model knows starts the graph leg there: ギヤハウジング
        # -> QC-2031's report -> 湖西工場 -> the chart's row, which names neither.
        question = "ギヤハウジングの不良ロットを作った工場の品質責任者は？"
        assert leg_paths(conn, question, GROUPS)[:1] == ["組織図.md"]
        assert leg_paths(conn, question, GROUPS, names=False) == []  # the rules: a role alone
        assert leg_paths(conn, question, ["hr"]) == []

        # A rebuild indexes every passage again, and asks the model nothing.
        gen = rebuild_in_process(settings, instance)
        assert len(fake.requests) == asked
        assert graph_metadata(instance)["llm_cached"] == asked
        assert described(conn, gen.schema) == said
        assert stated(conn, gen.schema) == stated(conn)


def test_a_failing_provider_leaves_the_rules_graph_and_every_document_searchable(
        settings, instance, conn, folder, monkeypatch):
    with fake_server({"/v1/messages": lambda body: (500, {"type": "error", "error": {
            "type": "api_error", "message": "overloaded"}})}) as fake:
        point_at(monkeypatch, "claude", fake.url)
        monkeypatch.setenv("KB_GRAPH_LLM", "claude")
        summary = ingest_paths([folder], None, configured(settings), instance)
    assert (summary.ingested, summary.failed) == (len(CORPUS), [])
    assert fake.requests  # asked, and failed
    metadata = graph_metadata(instance)
    assert metadata["llm_failed"] == passages(conn) and metadata["llm_extracted"] == 0
    assert described(conn) == {} and stated(conn) == set()
    rules = {key for (key,) in conn.execute("SELECT entity_key FROM mentions")}
    assert {"qc-2031", "zp-2041", "湖西工場"} <= rules
    assert conn.execute("SELECT count(*) FROM graph_llm_cache").fetchone()[0] == 0
    assert entity_card(conn, "QC-2031", GROUPS) is not None


def test_kb_llm_alone_sends_nothing_and_turning_the_extractor_on_rebuilds_the_index(
        settings, instance, conn, folder, monkeypatch):
    with fake_server({"/v1/messages": claude_reply}) as fake:
        point_at(monkeypatch, "claude", fake.url)
        monkeypatch.setenv("KB_LLM", "claude")
        monkeypatch.delenv("KB_GRAPH_LLM", raising=False)
        summary = ingest_paths([folder], None, configured(settings), instance)
        assert summary.ingested == len(CORPUS) and fake.requests == []
        assert described(conn) == {}

        # On: the indexed documents are stale, yet unchanged files are not ingested again one
        # by one; the rebuild (gated by its evaluation) reads every passage.
        monkeypatch.setenv("KB_GRAPH_LLM", "claude")
        settings = configured(settings)
        version = pipeline_version(make_embedder(settings.embedder), settings.graph_llm)
        assert rebuild_needed(conn, version)
        assert ingest_paths([folder], None, settings, instance).ingested == 0
        assert fake.requests == []
        gen = rebuild_in_process(settings, instance)
        assert len(fake.requests) == passages(conn, gen.schema)
        assert described(conn, gen.schema)["杉本亮介"] == ("thing", "湖西工場の品質責任者")
