"""Scans through the real pipeline: generated page images (kb_eval.scan_set) read by the real OCR
engine in real Dagster runs over a real PostgreSQL. Ingestion hands a scan to the read_scans
job and takes it back from the OCR cache; a rebuild reads no page again and a changed page alone
is read again; a page over its time limit fails its document alone; without the engine, scans
wait for it and are read once it is there; `kb ingest` reads a scan with the network blocked.

They need the engine and a Japanese font: tests/ocr_needs.py."""

from __future__ import annotations

import io
from pathlib import Path

import dagster as dg
import psycopg
import pytest
from PIL import Image

from kb_core.settings import Settings
from kb_eval.scan_set import render_pages
from kb_pipeline.defs.scans.assets import scanned_pages
from kb_pipeline.defs.scans.jobs import READ_SCANS_JOB
from kb_pipeline.in_process import ingest_paths, rebuild_in_process
from tests.integration.test_cli import _installation, _remove, kb_json
from tests.integration.test_hostile_files import failures, tick
from tests.ocr_needs import need_engine

A6 = (4.13, 5.83)  # small pages: quick to read, as legible as A4

RULES = "第3条（申請）\n休暇を取得する者は、所定の申請書を五営業日前までに所属長へ提出する。"
VERTICAL = ("第7条（保管）\n検品記録は品質管理課が十年間保管し、監査の求めに応じて提示する。"
            "保管の場所は本社の書庫とし、持ち出すときは課長の承認を得る。"
            "電子化した記録も同じ期間保管する。")
NOTICE = "お知らせ\n社員食堂は十二月二十九日から一月三日まで休業します。"


@pytest.fixture
def engine() -> None:
    need_engine()


def scan_pdf(*texts_and_vertical: tuple[str, bool]) -> bytes:
    """An image-only PDF, one A6 page per text (縦書き where marked), as a scanner writes it."""
    images = [render_pages(text, vertical=vertical, dpi=200, page_size=A6)[0].image
              for text, vertical in texts_and_vertical]
    out = io.BytesIO()
    images[0].save(out, format="PDF", save_all=True, append_images=images[1:], resolution=200)
    return out.getvalue()


def png(text: str, rotation: int = 0) -> bytes:
    out = io.BytesIO()
    render_pages(text, dpi=200, rotation=rotation, page_size=A6)[0].image.save(out, format="PNG")
    return out.getvalue()


def passages(conn: psycopg.Connection, path: str) -> list[tuple[str, str, bool]]:
    """(page, content, ocr) of the live passages of the document at `path`."""
    return conn.execute(
        "SELECT c.location, c.content, c.ocr FROM chunks c JOIN documents d "
        "ON d.id = c.document_id WHERE d.path = %s ORDER BY c.chunk_index", (path,)).fetchall()


def waiting(conn: psycopg.Connection) -> set[str]:
    return {Path(uri).name for (uri,) in conn.execute("SELECT source_uri FROM ocr_waiting")}


def pages_cached(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM ocr_pages").fetchone()[0]


def last_read(instance: dg.DagsterInstance) -> dict[str, float]:
    """The metadata of scanned_pages' latest materialization: what the OCR step read."""
    event = instance.get_latest_materialization_event(scanned_pages.key)
    assert event is not None and event.asset_materialization is not None
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def read_scans_runs(instance: dg.DagsterInstance) -> int:
    return len(instance.get_run_records(dg.RunsFilter(job_name=READ_SCANS_JOB.name)))


def normalized(text: str) -> str:
    return "".join(text.split()).replace("(", "（").replace(")", "）")


@pytest.mark.timeout(300)
def test_sensor_hands_scans_to_ocr_and_indexes_them_from_the_cache(engine, watched, instance,
                                                                   conn):
    folder, settings = watched
    (folder / "規程.md").write_text("# 規程\n\n文章のままの文書です。\n", encoding="utf-8")
    (folder / "規程スキャン.pdf").write_bytes(scan_pdf((RULES, False), (VERTICAL, True)))
    (folder / "お知らせ.png").write_bytes(png(NOTICE, rotation=180))
    blank = io.BytesIO()
    Image.new("L", (826, 1166), 255).save(blank, format="PNG")
    (folder / "白紙.png").write_bytes(blank.getvalue())  # no text on it at all

    tick(settings, instance)  # ingestion: the text now, the scans handed to OCR
    assert passages(conn, "watched/規程.md")
    assert waiting(conn) == {"規程スキャン.pdf", "お知らせ.png", "白紙.png"}
    assert not failures(conn)

    result = tick(settings, instance)  # the OCR step, in a job of its own
    assert {r.job_name for r in result.run_requests} == {READ_SCANS_JOB.name}
    assert waiting(conn) == set()
    read = last_read(instance)
    assert read["pages_read"] == 4 and read["pages_without_text"] == 1
    assert read["mean_confidence"] > 60

    tick(settings, instance)  # ingestion again, every page from the cache
    pdf = passages(conn, "watched/規程スキャン.pdf")
    assert {page for page, _, _ in pdf} == {"p.1", "p.2"} and all(ocr for _, _, ocr in pdf)
    text = normalized("".join(content for _, content, _ in pdf))
    assert "所定の申請書を五営業日前までに" in text  # horizontal
    assert "品質管理課が十年間保管し" in text  # 縦書き, columns right to left
    notice = normalized("".join(c for _, c, _ in passages(conn, "watched/お知らせ.png")))
    assert "社員食堂は十二月二十九日から" in notice  # scanned upside down
    assert not passages(conn, "watched/白紙.png") and not failures(conn)
    assert conn.execute("SELECT error FROM ingestion_failures WHERE skipped").fetchall() == [
        ("no text found by OCR (1 page)",)]
    assert not passages(conn, "watched/規程.md")[0][2]  # a text document's passage: no OCR

    runs = read_scans_runs(instance)
    assert not tick(settings, instance).run_requests  # nothing changed: nothing read again
    assert read_scans_runs(instance) == runs


@pytest.mark.timeout(300)
def test_rebuild_reads_no_page_and_an_edited_page_alone_is_read(engine, settings, instance,
                                                                 conn, tmp_path):
    folder = tmp_path / "scans"
    folder.mkdir()
    texts = [f"第{n}条\n本条は第{n}条の定めであり、その番号は{n}番である。" for n in range(1, 11)]
    scan = folder / "十ページ.pdf"
    scan.write_bytes(scan_pdf(*((text, False) for text in texts)))
    summary = ingest_paths([folder], ("staff",), settings, instance)
    assert summary.ingested == 1 and not summary.failed
    assert last_read(instance)["pages_read"] == 10 and pages_cached(conn) == 10

    texts[4] = "第5条\n本条は改定され、その番号は五番のままである。"
    scan.write_bytes(scan_pdf(*((text, False) for text in texts)))
    summary = ingest_paths([folder], ("staff",), settings, instance)
    assert summary.ingested == 1 and not summary.failed
    read = last_read(instance)
    assert (read["pages_read"], read["pages_cached"]) == (1, 9)
    assert pages_cached(conn) == 11
    assert "改定" in "".join(c for _, c, _ in passages(conn, "scans/十ページ.pdf"))

    runs = read_scans_runs(instance)
    gen = rebuild_in_process(settings, instance)  # its gate fails here: no evaluation set
    assert read_scans_runs(instance) == runs and pages_cached(conn) == 11  # nothing read
    rebuilt = conn.execute(
        f"SELECT bool_and(c.ocr), count(*) FROM {gen.schema}.chunks c "
        f"JOIN {gen.schema}.documents d ON d.id = c.document_id "
        "WHERE d.path = 'scans/十ページ.pdf'").fetchone()
    assert rebuilt[0] and rebuilt[1] == len(passages(conn, "scans/十ページ.pdf"))


@pytest.mark.timeout(300)
def test_a_page_over_its_time_limit_fails_its_document_alone(engine, settings, instance, conn,
                                                             tmp_path, monkeypatch):
    folder = tmp_path / "batch"
    folder.mkdir()
    (folder / "遅いスキャン.png").write_bytes(png(NOTICE))
    (folder / "本文.md").write_text("# 本文\n\n読める文書です。\n", encoding="utf-8")
    monkeypatch.setenv("KB_OCR_PAGE_TIMEOUT_S", "0.01")
    summary = ingest_paths([folder], ("staff",), Settings.from_env(), instance)
    assert summary.ingested == 1
    assert [(Path(f.source_uri).name, f.error) for f in summary.failed] == [
        ("遅いスキャン.png",
         "page 1: reading the page took over 0.01 s (KB_OCR_PAGE_TIMEOUT_S)")]
    assert failures(conn)["batch/遅いスキャン.png"][0] == "scanned_pages"


@pytest.mark.timeout(300)
def test_scans_wait_for_the_engine_and_are_read_once_it_is_installed(
        engine, settings, instance, conn, tmp_path, monkeypatch):
    folder = tmp_path / "waiting"
    folder.mkdir()
    (folder / "お知らせ.png").write_bytes(png(NOTICE))
    models = tmp_path / "no-models"
    models.mkdir()
    monkeypatch.setenv("TESSDATA_PREFIX", str(models))  # the engine finds none of its models
    summary = ingest_paths([folder], ("staff",), settings, instance)
    assert (summary.ingested, summary.failed) == (0, [])
    assert summary.waiting_for_ocr == [str(folder / "お知らせ.png")]
    assert any("apt-get install tesseract-ocr" in w for w in summary.warnings)
    assert waiting(conn) == {"お知らせ.png"} and not failures(conn)

    monkeypatch.delenv("TESSDATA_PREFIX")  # installed
    summary = ingest_paths([folder], ("staff",), settings, instance)
    assert summary.ingested == 1 and not summary.waiting_for_ocr
    assert "社員食堂" in "".join(c for _, c, _ in passages(conn, "waiting/お知らせ.png"))


@pytest.mark.timeout(600)
def test_kb_ingest_reads_a_scan_offline_and_search_says_ocr(engine, tmp_path):
    env, home = _installation()  # the default embedder, the network blocked
    folder = tmp_path / "offline"
    folder.mkdir()
    (folder / "お知らせ.png").write_bytes(png(NOTICE))
    try:
        ingested = kb_json(env, "ingest", str(folder), "--groups", "all-employees")
        assert (ingested["ingested"], ingested["failed"]) == (1, [])
        hits = kb_json(env, "search", "社員食堂はいつ休業しますか", "--groups",
                       "all-employees")["hits"]
        assert (hits[0]["path"], hits[0]["page"], hits[0]["ocr"]) == (
            "offline/お知らせ.png", "p.1", True)
    finally:
        _remove(env, home)
