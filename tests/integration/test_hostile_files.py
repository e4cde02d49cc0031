"""Hostile files in a watched folder, through real sensor ticks, real Dagster runs and a real
PostgreSQL: each file gets a precise recorded error (what `kb failures` lists) or is indexed
correctly, the batch goes on, the last good version of a document stays searchable, and nothing
outside the watched folder is read. Every file is generated here; none is committed."""

from __future__ import annotations

import functools
import io
import os
import random
import struct
import uuid
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import dagster as dg
import openpyxl
import psycopg
import pytest
from PIL import Image
from pypdf import PdfWriter

from kb_core.queries import query
from kb_core.settings import Settings
from kb_pipeline.definitions import make_definitions
from kb_pipeline.defs.ingestion.assets import raw_documents
from kb_pipeline.defs.ingestion.jobs import INGEST_JOB
from tests.integration.test_sensor import evaluate
from tests.unit.test_parsing import encrypt, make_pdf

MB = 2**20
SECRET = "社外秘ZQXSECRET"  # only ever written outside the watched folder

# --- running the sensor and its runs as the daemon would --------------------------------------


def launch(settings: Settings, instance: dg.DagsterInstance, result: dg.SensorResult,
           on_event: Callable[[dg.EventLogEntry], None] | None = None) -> None:
    """Execute the runs the sensor requested; `on_event` sees each of their events as it is
    stored, so a test can act at an exact point between two assets of a run."""
    definitions = make_definitions(settings)
    for request in result.run_requests or []:
        job = definitions.resolve_job_def(request.job_name or INGEST_JOB.name)
        run_id = str(uuid.uuid4())
        if on_event is not None:
            instance.add_event_listener(run_id, on_event)
        outcome = job.execute_in_process(instance=instance, tags=request.tags,
                                         run_config=request.run_config, run_id=run_id)
        assert outcome.success  # one bad file must never fail the run of the others


def tick(settings: Settings, instance: dg.DagsterInstance) -> dg.SensorResult:
    result = evaluate(settings, instance)
    launch(settings, instance, result)
    return result


def after_asset(asset: dg.AssetsDefinition, action: Callable[[], None]):
    """An event listener that runs `action` once, when `asset` has been materialized."""
    done: list[bool] = []

    def listener(entry: dg.EventLogEntry) -> None:
        event = entry.dagster_event
        if (not done and event is not None and event.is_step_materialization
                and event.asset_key == asset.key):
            done.append(True)
            action()

    return listener


# --- what the index and `kb failures` say ------------------------------------------------------


def failures(conn: psycopg.Connection) -> dict[str, tuple[str, str]]:
    """`kb failures`: path -> (stage, error) of every open failure."""
    return {path: (stage, error) for path, stage, error, _ in conn.execute(query("open_failures"))}


def contents(conn: psycopg.Connection) -> dict[str, str]:
    """path -> what is searched of the document (title, headings, passages), joined in order."""
    return dict(conn.execute(
        "SELECT d.path, string_agg(c.search_text, '\n' ORDER BY c.chunk_index) "
        "FROM documents d JOIN chunks c ON c.document_id = d.id GROUP BY d.path"))


def chunk_rows(conn: psycopg.Connection, path: str) -> list[tuple]:
    return conn.execute(
        "SELECT c.id, c.content, c.allowed_groups, "
        "       (SELECT array_agg(v.embedding::text ORDER BY v.view_index) "
        "        FROM chunk_vectors v WHERE v.chunk_id = c.id) "
        "FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.path = %s "
        "ORDER BY c.chunk_index",
        (path,)).fetchall()


def bytes_read() -> int:
    """Bytes this process (all its threads) has read so far: files, sockets and pipes."""
    with open("/proc/self/io") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("rchar:"))


# --- hostile files -----------------------------------------------------------------------------


def pdf_text(line: str) -> bytes:
    return make_pdf([["製品マニュアル", line]])


def pdf_mapping(placeholder: str, code: bytes) -> bytes:
    """A PDF whose ToUnicode map sends the glyph of `placeholder` to `code` (a broken font)."""
    data = make_pdf([[f"文字化け{placeholder}の後も本文は読めます。"]])
    target = b"<%s>" % placeholder.encode("utf-16-be").hex().upper().encode()
    assert target in data
    return data.replace(target, code)


def blank_pdf(pages: int) -> bytes:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=595, height=842)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def plain_zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("readme.txt", "これはただのZIPです。")
    return out.getvalue()


def big_workbook(rows: int, columns: int) -> bytes:
    workbook = openpyxl.Workbook(write_only=True)
    sheet = workbook.create_sheet("在庫")
    sheet.append([f"列{c}" for c in range(columns)])
    for r in range(1, rows):
        sheet.append([f"R{r}"] + [r % 10] * (columns - 1))
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def nested_html(depth: int) -> bytes:
    return b"<div>" * depth + "深い入れ子の本文".encode() + b"</div>" * depth


SCRIPTED_HTML = (
    "<html><head><title>お知らせ</title><style>p { color: red }</style>"
    "<script>var token = 'SCRIPTLEAK';</script></head><body>"
    "<script>document.write('SCRIPTLEAK')</script><style>.x{}</style>"
    "<p>見える本文です。</p><noscript>NOSCRIPTLEAK</noscript></body></html>"
).encode()

def png_claiming(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims `width` × `height` pixels: a decompression bomb's shape."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body)))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grey
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(b"\x00" * 1024)) + chunk(b"IEND", b""))


def noise_png(width: int = 600, height: int = 400) -> bytes:
    """A PNG of random pixels: it compresses badly, so half of it is half of its pixels."""
    image = Image.frombytes("L", (width, height), random.Random(44).randbytes(width * height))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def image_pdf(width_in: float, height_in: float) -> bytes:
    """A one-page PDF whose page is an image `width_in` × `height_in` inches large."""
    image = Image.new("L", (720, 720), 255)
    out = io.BytesIO()
    image.save(out, format="PDF", resolution=720 / max(width_in, height_in))
    return out.getvalue()


def tiff_pages(pages: int) -> bytes:
    frames = [Image.new("L", (16, 16), 255) for _ in range(pages)]
    out = io.BytesIO()
    frames[0].save(out, format="TIFF", save_all=True, append_images=frames[1:])
    return out.getvalue()


BINARY = random.Random(6).randbytes(4096)
ONE_LINE = "".join(f"第{i}項の本文です。" for i in range(40_000)).encode()  # 1.1 MB, no newline
NFD_NAME = "カ\u3099イト\u3099.md"  # ガイド, decomposed as a Mac writes it


@dataclass(frozen=True)
class Case:
    """A file to write under the watched folder and what must become of it."""

    name: str
    data: bytes
    error: str | None = None  # the exact recorded error; None: indexed
    stage: str = "parsed_documents"
    contains: tuple[str, ...] = ()  # indexed: text its chunks must contain
    lacks: tuple[str, ...] = ()  # indexed: text they must not contain


@functools.cache
def hostile_cases() -> list[Case]:
    """The files, built on first use (importing this module for its helpers stays cheap)."""
    return [
        Case("empty.md", b"", "file is empty"),
        Case("blank.txt", b" \n\t\n\r\n", "document contains no text"),
        Case("encrypted.pdf", encrypt(pdf_text("暗号化された本文"), user_password="pw"),
             "PDF is encrypted: a password is required to open it"),
        Case("blank.pdf", blank_pdf(2),
             "PDF has no text: 2 pages, without a text layer or an image to read"),
        # Scans: each limit is checked before a page is decoded or rendered, engine or not.
        Case("bomb.png", png_claiming(30_000, 30_000),
             "image refused undecoded as a possible decompression bomb: Image size (900000000 "
             "pixels) exceeds limit of 178956970 pixels, could be decompression bomb DOS attack."),
        Case("poster.pdf", image_pdf(200, 200),
             "page 1 is 5,080 × 5,080 mm: within the 50 MP limit (KB_OCR_MAX_MEGAPIXELS) it "
             "could be read at only 35 dpi, under the 100 dpi Japanese text needs"),
        Case("cut.png", noise_png()[:40_000],
             "image data is truncated or corrupt: image file is truncated"),
        Case("report.png", pdf_text("画像のふりをしたPDF"),
             "file is named .png but holds a PDF document, not an image"),
        Case("archive.tiff", tiff_pages(1000),
             "1,000 pages to read by OCR, over the limit of 500 (KB_OCR_MAX_PAGES)"),
        Case("zip.docx", plain_zip(),
             "not a valid DOCX file: ZIP archive has no [Content_Types].xml (not an Office "
             "document)"),
        Case("legacy.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(1024),
             "not a valid DOCX file: it is an OLE2 compound file, i.e. a legacy Office 97-2003 "
             "document or a password-protected Office file"),
        Case("binary.md", BINARY,
             f"binary data under a text extension (.md): NUL bytes at offset {BINARY.index(0)}"),
        Case("binary-no-nul.md", bytes(range(1, 256)) * 8,
             "text is not valid UTF-8, Shift_JIS/CP932 or EUC-JP (first invalid UTF-8 byte at "
             "offset 127)"),
        Case("nul.txt", "本文\x00です".encode(),
             "binary data under a text extension (.txt): NUL bytes at offset 6"),
        Case("surrogate-utf8.md", "前半".encode() + b"\xed\xa0\x80" + "後半".encode(),
             "text is not valid UTF-8: invalid continuation byte at offset 6 (the rest of the file "
             "is UTF-8)"),
        Case("surrogate-utf16.txt",
             b"\xff\xfe" + "前\ud800後".encode("utf-16-le", "surrogatepass"),
             "text starts with a UTF-16 byte-order mark but is not valid UTF-16: illegal UTF-16 "
             "surrogate at offset 4"),
        Case("invalid-utf8.txt", "規程の本文".encode() + b"\xff" + "続き".encode(),
             "text is not valid UTF-8: invalid start byte at offset 15 (the rest of the file is "
             "UTF-8)"),
        Case("sjis.txt", "旅費規程\n第1条 出張の日当は三千円とする。\n".encode("shift_jis"),
             contains=("第1条", "出張の日当は三千円とする。")),
        Case("bom.md", "\ufeff# 見出しBOM\n\n本文です。\n".encode(), contains=("見出しBOM",),
             lacks=("\ufeff",)),
        Case("utf16.txt", "\ufeffUTF16の本文です。".encode("utf-16-le"),
             contains=("UTF16の本文です。",)),
        Case("crlf.md", "# CRLF\r\n\r\n1行目です。\r\n2行目です。\r\n".encode(),
             contains=("1行目です。\n2行目です。",), lacks=("\r",)),
        Case("cr.txt", "旧Mac形式\r第1条 本文A。\r第2条 本文B。\r".encode(),
             contains=("本文A。", "本文B。"), lacks=("\r",)),
        Case("oneline.txt", ONE_LINE, contains=("第0項の本文です。", "第39999項の本文です。")),
        Case("deep.html", nested_html(20_000), contains=("深い入れ子の本文",)),
        Case("scripts.html", SCRIPTED_HTML, contains=("見える本文です。",),
             lacks=("SCRIPTLEAK", "color", "NOSCRIPTLEAK")),
        Case("nul-glyph.pdf", pdf_mapping("〓", b"<0000>"),
             contains=("文字化けの後も本文は読めます。",)),
        Case("surrogate-glyph.pdf", pdf_mapping("〓", b"<D800>"),
             contains=("文字化け\ufffdの後も本文は読めます。",)),
        Case("big.xlsx", big_workbook(10_000, 10), contains=("R1 | 1 | 1", "R9999 | 9 | 9")),
        Case("name with spaces.md", "# 空白\n\n空白のある名前。\n".encode(),
             contains=("空白のある名前。",)),
        Case("就業規則（改定版）.md", "# 改定版\n\n日本語の名前。\n".encode(),
             contains=("日本語の名前。",)),
        Case("📄お知らせ🎉.md", "お知らせ本文です。\n".encode(), contains=("お知らせ本文です。",)),
        Case(NFD_NAME, "合成されていない名前の本文。\n".encode(),
             contains=("合成されていない名前の本文。",)),
    ]
SHIFT_JIS_NAME = os.fsdecode("テスト.md".encode("shift_jis"))  # not UTF-8: surrogates in str


def case_path(case: Case) -> str:
    """The path `kb failures` and search hits show: NFC, as people type it."""
    return f"watched/{case.name}".replace(NFD_NAME, "ガイド.md")


def write_cases(folder: Path) -> None:
    for case in hostile_cases():
        (folder / case.name).write_bytes(case.data)


def make_outside(tmp_path: Path) -> Path:
    """Files outside the watched folder that links inside it point at."""
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    for file in (outside / "secret.md", outside / "dir" / "secret.md"):
        file.write_text(f"# 機密\n\n{SECRET}\n", encoding="utf-8")
    (outside / "access.toml").write_text('groups = ["everyone"]\n', encoding="utf-8")
    return outside


def link_hostile(folder: Path, outside: Path) -> None:
    """Symlinks (a loop, out of the folder) and names no partition key can carry."""
    (folder / "loop.md").symlink_to("loop.md")
    (folder / "out.md").symlink_to(outside / "secret.md")
    (folder / "linked-dir").symlink_to(outside / "dir", target_is_directory=True)
    (folder / "linked-acl").mkdir()
    (folder / "linked-acl" / "_access.toml").symlink_to(outside / "access.toml")
    (folder / "linked-acl" / "doc.md").write_text("# 文書\n\n本文。\n", encoding="utf-8")
    (folder / SHIFT_JIS_NAME).write_text("名前だけが壊れています。", encoding="utf-8")
    (folder / "tab\tname.md").write_text("制御文字の名前。", encoding="utf-8")


# --- the batch ---------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_hostile_folder_in_one_batch(watched, instance, conn, tmp_path):
    folder, settings = watched
    (folder / "keep").mkdir()
    first_versions = {
        "keep/manual.pdf": pdf_text("保証期間は1年間です。"),
        "keep/notes.md": "# 議事録\n\n決定事項は三点です。\n".encode(),
        "keep/data.txt": "データ定義書\n項目は十個です。\n".encode(),
    }
    for name, data in first_versions.items():
        (folder / name).write_bytes(data)
    tick(settings, instance)
    kept = {f"watched/{name}": chunk_rows(conn, f"watched/{name}") for name in first_versions}
    assert all(kept.values())

    # New versions that are bad, a good newcomer, and every hostile file at once.
    pdf = first_versions["keep/manual.pdf"]
    (folder / "keep" / "manual.pdf").write_bytes(pdf[: len(pdf) // 2])
    (folder / "keep" / "notes.md").write_bytes(BINARY)
    with (folder / "keep" / "data.txt").open("r+b") as fh:
        fh.truncate(200 * MB)  # sparse: instant, and reading it would show in bytes_read()
    (folder / "新着.md").write_text("# 新着\n\n社内報は毎月1日に発行します。\n", encoding="utf-8")
    write_cases(folder)
    link_hostile(folder, make_outside(tmp_path))

    before = bytes_read()
    result = tick(settings, instance)
    read = bytes_read() - before

    assert len(result.run_requests) == 1  # the whole batch in one run
    opened, texts = failures(conn), contents(conn)
    problems = []
    for case in hostile_cases():
        path = case_path(case)
        if case.error is not None:
            if opened.get(path) != (case.stage, case.error):
                problems.append(f"{case.name}: expected {case.error!r}, got {opened.get(path)}")
            if path in texts:
                problems.append(f"{case.name}: indexed although it failed")
        elif path not in texts:
            problems.append(f"{case.name}: not indexed ({opened.get(path)})")
        else:
            problems += [f"{case.name}: lacks {t!r}" for t in case.contains if t not in texts[path]]
            problems += [f"{case.name}: has {t!r}" for t in case.lacks if t in texts[path]]
    assert not problems, "\n".join(problems)

    # The bad new versions are recorded; their last good versions are still what is searched.
    assert opened["watched/keep/manual.pdf"] == (
        "parsed_documents", "PDF is truncated: no %%EOF marker at the end")
    assert opened["watched/keep/notes.md"] == ("parsed_documents", "binary data under a text "
                                               f"extension (.md): NUL bytes at offset "
                                               f"{BINARY.index(0)}")
    assert opened["watched/keep/data.txt"] == (
        "raw_documents", "file is 200.0 MB, over the limit of 50 MB (KB_MAX_FILE_MB)")
    assert {path: chunk_rows(conn, path) for path in kept} == kept
    assert "社内報は毎月1日に発行します。" in texts["watched/新着.md"]
    # Without reading the 200 MB file: the whole tick read far less than it holds (about 100 MB
    # of its own: the hostile files, Dagster's storage, the modules a first image loads).
    assert read < 150 * MB, f"the tick read {read / MB:.0f} MB"

    # Nothing outside the watched folder was indexed, registered or given its groups.
    assert not [path for path, text in texts.items() if SECRET in text]
    assert opened["watched/linked-acl/doc.md"] == (
        "raw_documents", f"{folder}/linked-acl/_access.toml: access file is a symlink leading "
        "outside the watched folder; not read")
    assert not conn.execute(
        "SELECT 1 FROM documents WHERE 'everyone' = ANY(allowed_groups)").fetchall()
    # Exactly the regular files inside were registered (no loop, no link out, no name that
    # cannot be a key), and each is indexed or has a recorded error: none dropped silently.
    expected = {case_path(case) for case in hostile_cases()} | {
        f"watched/{name}" for name in [*first_versions, "新着.md", "linked-acl/doc.md"]}
    indexed = {path for (path,) in conn.execute("SELECT path FROM documents")}
    registered = {path for (path,) in conn.execute("SELECT path FROM document_sources")}
    assert registered == expected == indexed | opened.keys()

    # A third tick changes nothing: failing files are not retried, nor re-read, nor re-recorded.
    before = bytes_read()
    again = tick(settings, instance)
    assert not again.run_requests
    assert bytes_read() - before < 20 * MB
    assert failures(conn) == opened
    assert conn.execute(
        "SELECT count(*) FROM ingestion_failures WHERE source_uri = %s",
        (str(folder / "keep" / "data.txt"),)).fetchone()[0] == 1


# --- the time-dependent cases ------------------------------------------------------------------


def test_file_deleted_between_the_sensor_tick_and_the_run(watched, instance, conn):
    folder, settings = watched
    doomed, other = folder / "doomed.md", folder / "other.md"
    doomed.write_text("# 消える\n\n本文。\n", encoding="utf-8")
    other.write_text("# 残る\n\n残る本文。\n", encoding="utf-8")
    result = evaluate(settings, instance)
    doomed.unlink()
    launch(settings, instance, result)

    assert failures(conn) == {
        "watched/doomed.md": ("raw_documents", "file disappeared before it could be read")}
    assert "残る本文。" in contents(conn)["watched/other.md"]
    # The next tick removes its partition and resolves the failure, launching nothing.
    assert not tick(settings, instance).run_requests
    assert failures(conn) == {}
    assert str(doomed) not in instance.get_dynamic_partitions("documents")


def test_file_deleted_after_its_snapshot_fails_at_parsing(watched, instance, conn):
    folder, settings = watched
    doomed = folder / "doomed.md"
    doomed.write_text("# 消える\n\n本文。\n", encoding="utf-8")
    (folder / "other.md").write_text("# 残る\n\n残る本文。\n", encoding="utf-8")
    launch(settings, instance, evaluate(settings, instance),
           after_asset(raw_documents, doomed.unlink))
    assert failures(conn) == {
        "watched/doomed.md": ("parsed_documents", "file disappeared before it could be parsed")}
    assert "残る本文。" in contents(conn)["watched/other.md"]


def test_file_that_changes_while_it_is_read_keeps_its_last_good_version(
    watched, instance, conn
):
    folder, settings = watched
    doc = folder / "規程.md"
    doc.write_text("# 規程\n\n第1条 版1の本文。\n", encoding="utf-8")
    tick(settings, instance)
    first = chunk_rows(conn, "watched/規程.md")

    doc.write_text("# 規程\n\n第1条 版2の本文。\n", encoding="utf-8")
    edit = after_asset(raw_documents, lambda: doc.write_text(
        "# 規程\n\n第1条 版3の本文。\n", encoding="utf-8"))
    launch(settings, instance, evaluate(settings, instance), edit)

    assert failures(conn) == {"watched/規程.md": (
        "parsed_documents", "file changed while it was being ingested; its new version is "
        "picked up on the next sensor tick")}
    assert chunk_rows(conn, "watched/規程.md") == first  # never a mix, never nothing
    # The next tick ingests what the file holds now.
    assert len(tick(settings, instance).run_requests) == 1
    assert "版3の本文" in contents(conn)["watched/規程.md"]
    assert failures(conn) == {}


def test_file_swapped_for_an_outside_symlink_after_the_tick_is_not_indexed(
    watched, instance, conn, tmp_path
):
    folder, settings = watched
    doc = folder / "swap.md"
    doc.write_text("# 普通\n\n普通の本文。\n", encoding="utf-8")
    result = evaluate(settings, instance)
    doc.unlink()
    doc.symlink_to(make_outside(tmp_path) / "secret.md")
    launch(settings, instance, result)

    assert failures(conn) == {"watched/swap.md": (
        "raw_documents", f"{doc}: file is a symlink leading outside the watched folder; "
        "not read")}
    assert not conn.execute("SELECT 1 FROM documents").fetchall()


def test_oversized_file_launches_no_run_and_is_retried_once_rewritten(watched, instance, conn):
    folder, settings = watched
    settings = replace(settings, max_file_bytes=MB)
    big = folder / "big.txt"
    big.write_bytes("あ".encode() * MB)  # 3 MB
    first = tick(settings, instance)
    assert not first.run_requests
    assert failures(conn) == {"watched/big.txt": (
        "raw_documents", "file is 3.0 MB, over the limit of 1 MB (KB_MAX_FILE_MB)")}
    big.write_text("小さくなった本文。\n", encoding="utf-8")
    assert len(tick(settings, instance).run_requests) == 1
    assert failures(conn) == {}
    assert "小さくなった本文。" in contents(conn)["watched/big.txt"]
