"""Gated rebuilds (real PostgreSQL, real Dagster runs driven by the real folder sensor): a
pipeline change rebuilds every document into a new generation beside the live one, which keeps
answering; a broken rebuild is evaluated, blocked and never published; a good one is published
in one switch that no reader sees half done."""

from __future__ import annotations

import dataclasses
import secrets
import threading
from pathlib import Path

import dagster as dg
import psycopg
import pytest

from kb_core.database import connect
from kb_core.embeddings import make_embedder
from kb_core.generations import (
    GenerationError,
    create_generation,
    discard_generation,
    generation,
    list_generations,
    live_generation,
    publish_generation,
    record_evaluation,
    use_generation,
)
from kb_core.settings import DEFAULT_SYNONYMS, REPO_ROOT, EmbedderSettings, EvalSettings, Settings
from kb_pipeline import stages
from kb_pipeline.chunking import Chunk, chunk_document
from kb_pipeline.definitions import make_definitions
from kb_pipeline.defs.resources import PostgresResource
from kb_pipeline.runs import GENERATION_TAG
from kb_search.search import Searcher, configure_search_session
from kb_search.synonyms import Synonyms
from tests.fake_servers import fake_server
from tests.integration.test_embedders import openai_embeddings
from tests.integration.test_sensor import evaluate

QUESTIONS = 30


@pytest.fixture
def settings(settings: Settings, tmp_path: Path) -> Settings:
    """The first answerable questions of the development set, gated by the margin alone (the
    stand-in embedder's absolute recall says nothing)."""
    lines = (REPO_ROOT / "samples" / "eval.jsonl").read_text(encoding="utf-8").splitlines()
    answerable = [line for line in lines if '"expected_source"' in line][:QUESTIONS]
    path = tmp_path / "questions.jsonl"
    path.write_text("\n".join(answerable) + "\n", encoding="utf-8")
    return dataclasses.replace(settings, evaluation=EvalSettings(sets=(path,), min_recall_at_5=0))


def tick(settings: Settings, instance: dg.DagsterInstance,
         embedder: str = "hashing") -> list[dg.ExecuteInJobResult]:
    """One sensor evaluation and every run it requests, executed here as the daemon would
    (the sensor and the runs use `embedder`, as under `kb up` with KB_EMBEDDER set to it)."""
    settings = dataclasses.replace(settings, embedder=EmbedderSettings(embedder))
    defs = make_definitions(settings)
    return [
        defs.resolve_job_def(run.job_name).execute_in_process(
            instance=instance, tags=run.tags, run_config=run.run_config,
            partition_key=run.partition_key, raise_on_error=False)
        for run in evaluate(settings, instance).run_requests or []
    ]


def change_pipeline(monkeypatch: pytest.MonkeyPatch, chunker_version: str,
                    chunker=None) -> None:  # noqa: ANN001 - the chunker's signature
    monkeypatch.setattr(stages, "CHUNKER_VERSION", chunker_version)
    if chunker is not None:
        monkeypatch.setattr(stages, "chunk_document", chunker)


def truncating_chunker(doc, count_tokens, **kwargs) -> list[Chunk]:  # noqa: ANN001
    """A chunker bug: every document cut down to its first passage's first 12 characters."""
    first = chunk_document(doc, count_tokens, **kwargs)[0]
    text = first.text[:12]
    return [Chunk(index=0, heading=first.heading, location=first.location, content=text,
                  text=text, token_count=count_tokens(text))]


def hybrid_hits(conn: psycopg.Connection, question: str,
                searcher: Searcher | None = None) -> list[tuple[str, str]]:
    searcher = searcher or Searcher(EmbedderSettings("hashing"), Synonyms(DEFAULT_SYNONYMS))
    configure_search_session(conn)
    result, _ = searcher.search(conn, searcher.prepare(question), ["all-employees"], 5)
    return [(hit.path, hit.content) for hit in result.hits]


def passage_indexes(conn: psycopg.Connection, schema: str) -> set[tuple[str, str]]:
    """The indexes of a generation's passages and their views, whatever their names."""
    return set(conn.execute(
        "SELECT tablename, regexp_replace(indexdef, '^.* USING ', '') FROM pg_indexes "
        "WHERE schemaname = %s AND tablename IN ('chunks', 'chunk_vectors')", (schema,)))


def schemas(conn: psycopg.Connection) -> set[str]:
    return {row[0] for row in conn.execute(
        "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'kb_gen_%'")}


def test_a_broken_chunker_is_evaluated_blocked_and_never_published(
        settings, instance, conn, docs_dir, monkeypatch):
    tick(settings, instance)  # the first index: generation 1, built document by document
    before = hybrid_hits(conn, "有給休暇は何日前までに申請が必要ですか")
    assert before
    change_pipeline(monkeypatch, "broken-1", truncating_chunker)

    rebuild = tick(settings, instance)
    assert rebuild and all(r.success for r in rebuild)
    assert {r.dagster_run.tags[GENERATION_TAG] for r in rebuild} == {"2"}
    assert generation(conn, 2).state == "building"
    # The live generation is untouched while generation 2 is built beside it.
    assert live_generation(conn).id == 1
    assert hybrid_hits(conn, "有給休暇は何日前までに申請が必要ですか") == before

    (gate,) = tick(settings, instance)
    assert not gate.success  # the blocking check stopped the run before publication
    checks = {e.check_name: e for e in gate.get_asset_check_evaluations()}
    assert not checks["generation_recall_at_5_holds"].passed
    assert checks["generation_covers_live_documents"].passed
    assert not gate.asset_materializations_for_node("published_generation")
    # What the UI shows for the refused generation: its figures beside the live one's.
    (evaluated,) = gate.asset_materializations_for_node("generation_evaluation")
    assert evaluated.partition == "2"
    assert "below the live generation's" in evaluated.metadata["verdict"].value
    assert "| live generation |" in evaluated.metadata["comparison"].value
    failed = generation(conn, 2)
    assert failed.state == "failed" and "below the live generation's" in failed.note
    live_recall = failed.evaluation["live_hybrid_recall_at_5"]
    assert live_recall >= 0.5  # the gate compared against something worth keeping
    assert failed.evaluation["hybrid_recall_at_5"] < live_recall - 0.02
    assert live_generation(conn).id == 1
    assert hybrid_hits(conn, "有給休暇は何日前までに申請が必要ですか") == before

    # A refused generation is not rebuilt on every tick and cannot be published. Edits wait:
    # the running chunker is the refused one, and must not reach the live documents either.
    rules = docs_dir / "all" / "就業規則.md"
    rules.write_text(rules.read_text(encoding="utf-8") + "\n社内運動会は十月に開催する。\n",
                     encoding="utf-8")
    assert tick(settings, instance) == []
    assert hybrid_hits(conn, "有給休暇は何日前までに申請が必要ですか") == before
    version = stages.pipeline_version(make_embedder(EmbedderSettings("hashing")))
    with pytest.raises(GenerationError, match="only a generation that passed"):
        publish_generation(conn, 2, version, lambda uri: ([], None))
    discarded = make_definitions(settings).resolve_job_def("discard_generation").execute_in_process(
        instance=instance,
        run_config={"ops": {"discard_generation_op": {"config": {"generation": 2}}}})
    assert discarded.success and generation(conn, 2).state == "discarded"
    with pytest.raises(GenerationError, match="is discarded: nothing to discard"):
        discard_generation(conn, 2, "twice")
    # Emptied, not dropped: a straggling run of it must not fall through to the live views.
    assert conn.execute("SELECT count(*) FROM kb_gen_2.chunks").fetchone() == (0,)
    with pytest.raises(GenerationError, match="generation 2 is discarded"):
        use_generation(conn, 2)
    assert hybrid_hits(conn, "有給休暇は何日前までに申請が必要ですか") == before


def test_a_good_rebuild_is_published_in_one_switch_no_reader_sees_half_done(
        settings, instance, conn, docs_dir, monkeypatch):
    tick(settings, instance)
    question = "ZP-2041の保証期間は？"
    before = hybrid_hits(conn, question)
    ids_before = {row[0] for row in conn.execute("SELECT id FROM chunks")}
    chunks_before = len(ids_before)
    old_version = live_generation(conn).pipeline_version
    change_pipeline(monkeypatch, "same-output-new-version")
    new_version = stages.pipeline_version(make_embedder(EmbedderSettings("hashing")))

    assert all(r.success for r in tick(settings, instance))  # rebuilt into generation 2
    # Its documents were written without the search indexes, which the gate run builds.
    live_indexes = passage_indexes(conn, "kb_gen_1")
    assert {"hnsw (embedding vector_cosine_ops) WITH (m='24', ef_construction='256')",
            "gin (keywords, allowed_groups)", "gin (allowed_groups)"} <= {
        shape for _, shape in live_indexes}
    assert passage_indexes(conn, "kb_gen_2") == {
        (table, shape) for table, shape in live_indexes if shape.startswith("btree")}
    # While it waited, an access rule was narrowed: the published generation must not bring
    # the old groups back.
    (docs_dir / "all" / "_access.toml").write_text('groups = ["all-employees-jp"]\n',
                                                   encoding="utf-8")

    seen: list[tuple[str, ...]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        # One statement per observation: documents, chunks and keyword statistics together.
        with connect(settings.database_url, autocommit=True) as reader:
            while not stop.is_set():
                try:
                    seen.append(reader.execute(
                        "SELECT array_agg(DISTINCT d.pipeline_version), count(*), "
                        "(SELECT sum(df) FROM keyword_df WHERE term = '') "
                        "FROM chunks c JOIN documents d ON d.id = c.document_id").fetchone())
                except BaseException as exc:  # noqa: BLE001 - every failure is the finding
                    errors.append(exc)
                    return

    reader = threading.Thread(target=read)
    reader.start()
    while not seen and not errors:
        stop.wait(0.01)
    try:
        results = tick(settings, instance)  # re-permission, then evaluate and publish
    finally:
        stop.set()
        reader.join()
    assert len(results) == 1 and results[0].success
    assert not errors
    (built,) = results[0].asset_materializations_for_node("generation_search_indexes")
    assert built.metadata["indexes_built"].value == 3
    assert passage_indexes(conn, "kb_gen_2") == live_indexes
    assert live_generation(conn).id == 2
    assert {g.id: g.state for g in list_generations(conn)} == {1: "retired", 2: "live"}
    assert schemas(conn) == {"kb_gen_2"}  # the old generation's tables are dropped
    # Ids come from sequences all generations share: no chunk id names two passages.
    assert not ids_before & {row[0] for row in conn.execute("SELECT id FROM chunks")}

    versions = {row[0][0] for row in seen}
    assert all(len(row[0]) == 1 for row in seen), "a statement mixed two generations"
    assert all(row[1] == chunks_before and row[2] == chunks_before for row in seen)
    assert versions == {old_version, new_version}
    assert hybrid_hits(conn, question) == []  # all-employees lost access while it waited
    groups = conn.execute(
        "SELECT DISTINCT allowed_groups FROM documents WHERE path LIKE 'docs/all/%'").fetchall()
    assert groups == [(["all-employees-jp"],)]
    (docs_dir / "all" / "_access.toml").write_text('groups = ["all-employees"]\n',
                                                   encoding="utf-8")
    tick(settings, instance)
    assert hybrid_hits(conn, question) == before
    assert tick(settings, instance) == []  # nothing left to do: the index is current


def test_content_changes_during_a_rebuild_reach_the_live_generation_and_the_new_one(
        settings, instance, conn, docs_dir, monkeypatch):
    tick(settings, instance)
    change_pipeline(monkeypatch, "same-output-new-version")
    assert all(r.success for r in tick(settings, instance))  # generation 2 built, not published
    rules = docs_dir / "all" / "就業規則.md"
    rules.write_text(rules.read_text(encoding="utf-8")
                     + "\n\n## 第99条（運動会）\n\n社内運動会は毎年十月の第二土曜日に開催する。\n",
                     encoding="utf-8")
    (docs_dir / "all" / "社内報_2026年11月.md").write_text(
        "# 社内報 2026年11月号\n\n新しい社員食堂は十二月一日に開業します。\n", encoding="utf-8")

    content_run, catch_up = tick(settings, instance)
    assert GENERATION_TAG not in content_run.dagster_run.tags
    (staged, *_) = content_run.asset_materializations_for_node("raw_documents")
    # Only the edited and the new file: the other documents, built by the old pipeline
    # version, wait for the generation being built instead of being re-ingested one by one.
    assert staged.metadata["documents"].value == 2
    assert any("運動会" in content for _, content in hybrid_hits(conn, "社内運動会はいつ"))
    # The generation being built takes both too, in a second round, before its evaluation
    # (whose coverage gate would otherwise miss the new file).
    assert catch_up.dagster_run.tags[GENERATION_TAG] == "2" and catch_up.success
    assert generation(conn, 2).build_rounds == 2

    (gate,) = tick(settings, instance)
    assert gate.success and live_generation(conn).id == 2
    assert any("運動会" in content for _, content in hybrid_hits(conn, "社内運動会はいつ"))
    assert any("社員食堂" in content for _, content in hybrid_hits(conn, "社員食堂の開業日"))
    assert tick(settings, instance) == []


def test_a_new_embedding_model_is_rebuilt_while_content_changes_wait_for_it(
        settings, instance, conn, docs_dir, monkeypatch):
    tick(settings, instance)
    with fake_server({"/v1/embeddings": openai_embeddings}) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{fake.url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        faq = docs_dir / "all" / "ITヘルプデスクFAQ.txt"
        faq.write_text(faq.read_text(encoding="utf-8") + "\n内線番号は4649です。\n",
                       encoding="utf-8")

        rebuild = tick(settings, instance, "openai")
        # The live generation's vectors come from another model: the edit cannot go there,
        # so no content run is launched, only the rebuild's.
        assert rebuild and all(GENERATION_TAG in r.dagster_run.tags for r in rebuild)
        assert all(r.success for r in rebuild)
        # A reader configured as the pipeline now is (the service under KB_EMBEDDER=openai)
        # keeps embedding questions with the live generation's model until the publication.
        reader = Searcher(EmbedderSettings("openai"), Synonyms(DEFAULT_SYNONYMS))
        question = "有給休暇は何日前までに申請が必要ですか"
        calls = len(fake.requests)
        assert hybrid_hits(conn, question, reader) == hybrid_hits(conn, question)
        assert len(fake.requests) == calls and reader.model == "hashing/terms-384"

        (gate,) = tick(settings, instance, "openai")
        assert gate.success, "the live generation is not comparable: the floor alone gates"
        assert live_generation(conn).id == 2
        assert hybrid_hits(conn, question, reader)
        (embedded,) = fake.requests[-1][1]["input"]  # the question, synonyms appended
        assert embedded.startswith(question)
        assert reader.model == "openai/text-embedding-3-small@384"
        figures = generation(conn, 2).evaluation
        assert figures["live_hybrid_recall_at_5"] is None
        model = conn.execute(
            "SELECT value FROM index_settings WHERE key = 'embedding_model'").fetchone()[0]
        assert model == "openai/text-embedding-3-small@384"
        assert conn.execute("SELECT count(*) FROM documents WHERE path LIKE '%FAQ%' "
                            "AND EXISTS (SELECT 1 FROM chunks c WHERE c.document_id = "
                            "documents.id AND c.content LIKE '%4649%')").fetchone()[0] == 1
        assert tick(settings, instance, "openai") == []


def test_publish_gives_every_document_its_current_access(settings, instance, conn, monkeypatch):
    # Generation 2 holds a document the live one lacks (say its new parser reads a file the
    # old one could not): its groups come from the access rule as it is at publication, not
    # as it was when the rebuild indexed it; the others take the live documents' groups.
    tick(settings, instance)
    version = stages.pipeline_version(make_embedder(EmbedderSettings("hashing")))
    rules = conn.execute("SELECT source_uri FROM documents WHERE path LIKE '%就業規則%'"
                         ).fetchone()[0]
    conn.execute("UPDATE documents SET allowed_groups = '{narrowed}' WHERE source_uri = %s",
                 (rules,))
    gen = create_generation(conn, version)
    use_generation(conn, gen.id)
    conn.execute("INSERT INTO documents SELECT * FROM public.documents")
    conn.execute("INSERT INTO chunks SELECT * FROM public.chunks")
    conn.execute("UPDATE documents SET allowed_groups = '{all-employees}'")
    conn.execute("UPDATE chunks SET allowed_groups = '{all-employees}'")
    only_new, unchanged = [row[0] for row in conn.execute(
        "SELECT source_uri FROM documents WHERE path LIKE '%FAQ%' OR path LIKE '%育児介護%' "
        "ORDER BY path LIKE '%育児介護%'")]
    conn.execute("UPDATE documents SET access_rule = 'rule-now' WHERE source_uri = %s",
                 (unchanged,))
    row_versions = (f"SELECT xmin::text FROM {gen.schema}.chunks WHERE document_id = "
                    f"(SELECT id FROM {gen.schema}.documents WHERE source_uri = %s)")
    versions = conn.execute(row_versions, (unchanged,)).fetchall()
    use_generation(conn, None)
    conn.execute("DELETE FROM documents WHERE source_uri = ANY(%s)", ([only_new, unchanged],))
    record_evaluation(conn, gen.id, True, {}, None)

    asked = []
    publish_generation(conn, gen.id, version, lambda uri: asked.append(uri) or (
        (["all-employees"] if uri == unchanged else ["it-staff"]), "rule-now"))
    assert sorted(asked) == sorted([only_new, unchanged])
    groups = dict(conn.execute("SELECT source_uri, allowed_groups FROM documents"))
    assert groups[rules] == ["narrowed"] and groups[only_new] == ["it-staff"]
    # A document indexed with the access it has now is not written again.
    assert groups[unchanged] == ["all-employees"]
    assert conn.execute(row_versions, (unchanged,)).fetchall() == versions
    chunk_groups = dict(conn.execute(
        "SELECT d.source_uri, array_agg(DISTINCT g) FROM chunks c "
        "JOIN documents d ON d.id = c.document_id, unnest(c.allowed_groups) g "
        "GROUP BY d.source_uri"))
    assert chunk_groups[rules] == ["narrowed"] and chunk_groups[only_new] == ["it-staff"]


def test_keyword_vectors_stay_inside_the_rows_of_the_live_and_a_new_generation(conn):
    # The keyword leg reads each candidate's tsvector in place (sql/006_inline_keywords.sql);
    # one stored out of line would be fetched again for every term.
    # ~3 kB that does not compress, past the 2 kB at which rows are squeezed by default.
    keywords = " ".join(f"'{secrets.token_hex(5)}':{i}" for i in range(1, 250))
    gen = create_generation(conn, "inline-test")
    for generation_id in (live_generation(conn).id, gen.id):
        use_generation(conn, generation_id)
        document_id = conn.execute(
            "INSERT INTO documents (source_uri, path, title, mime, size_bytes, checksum, "
            "pipeline_version, allowed_groups, revision_source, file_mtime) VALUES "
            "('/inline', 'inline', 'x', 'text/plain', 1, 'c', 'v', '{g}', 'mtime', now()) "
            "RETURNING id").fetchone()[0]
        outside = conn.execute(
            "INSERT INTO chunks (document_id, chunk_index, heading, content, search_text, "
            "token_count, text_sha256, allowed_groups, keywords) "
            "VALUES (%s, 0, '', 'c', 'c', 10, 'x', '{g}', %s::tsvector) "
            "RETURNING pg_column_toast_chunk_id(keywords) IS NOT NULL",
            (document_id, keywords)).fetchone()[0]
        assert not outside, generation_id


def test_only_a_rebuild_writes_without_waiting_for_each_commit_to_reach_the_disk(settings, conn):
    gen = create_generation(conn, "durability-test")
    postgres = PostgresResource(url=settings.database_url)
    with postgres.connection(gen.id) as rebuilding, postgres.connection() as live:
        assert rebuilding.execute("SHOW synchronous_commit").fetchone()[0] == "off"
        assert live.execute("SHOW synchronous_commit").fetchone()[0] == "on"


def test_a_generation_damaged_while_it_was_built_is_refused_before_its_evaluation(
        settings, instance, conn, monkeypatch):
    # Each build run checks the documents it wrote; the gate checks the whole generation once.
    tick(settings, instance)
    change_pipeline(monkeypatch, "same-output-new-version")
    assert all(r.success for r in tick(settings, instance))
    assert generation(conn, 2).state == "building"
    use_generation(conn, 2)
    conn.execute("DELETE FROM chunk_vectors WHERE chunk_id = (SELECT min(id) FROM chunks)")
    use_generation(conn, None)
    (gate,) = tick(settings, instance)
    checks = {c.check_name: c for c in gate.get_asset_check_evaluations()}
    assert not checks["generation_index_is_sound"].passed
    assert "generation_recall_at_5_holds" not in checks  # its evaluation never ran
    refused = generation(conn, 2)
    assert refused.state == "failed" and "chunks_with_bad_embeddings 1" in refused.note
    assert live_generation(conn).id == 1
