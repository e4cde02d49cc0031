"""Renders text documents as scanned pages for evaluating OCR: the scans and each page's text.

    .venv/bin/python -m kb_eval.scan_set /tmp/scans --samples samples/docs \\
        --jaquad ../shared/devsets/jaquad --articles 15 --seed 44

Why: the team has no scanned documents it may commit, and a scan made here comes with the exact
text of each page, so OCR is scored against what was printed (character error rate) and the
same questions can be asked of a scanned article and of its text (issue 44). The scans are
generated, never committed: the same sources and seed give a byte-identical manifest (PDF files
differ only in the random /ID pdfium writes into their trailer).

Flags:
- `OUT_DIR`: where everything is written (created; files of an earlier run are overwritten).
- `--samples DIR`: company documents (samples/docs); each is written under `OUT_DIR/samples/`
  in its own relative folder, beside a copy of that folder's `_access.toml`, so access groups
  stay as they were. Spreadsheets (.xlsx) are skipped: printed, their grid is what carries the
  meaning, and text lines are not a fair stand-in for it. Files the parser refuses are skipped
  too; both are named on stderr.
- `--jaquad DIR`, `--articles N` (default 15): the JaQuAD development set (`docs/`, `eval.jsonl`).
  N articles are drawn with the seed from the 2N with the most answerable questions. Written:
  `OUT_DIR/jaquad/` (the scans), `OUT_DIR/jaquad_text/` (the chosen articles as text, for a
  text-only installation), `OUT_DIR/jaquad_eval.jsonl` (their answerable questions, with
  `expected_source` naming the scan) and `OUT_DIR/jaquad_text_eval.jsonl` (the same questions
  naming the text article).
- `--max-pages N`: keep only each document's first N pages (for a quick OCR bench; a capped set
  is not for `kb eval`, since questions about the dropped pages cannot be answered).
- `--seed S` (default 44): the seed of every draw.

Pages: A4, 10.5 pt Noto Serif CJK JP (Debian's fonts-noto-cjk), 20 mm margins. Each page draws its
own type, in fixed shares kept exact by drawing from shuffled bags: dpi 150/200/300 in thirds,
30% vertical (縦書き: columns top to bottom, right to left), 10% turned 90/180/270 degrees
clockwise, skew uniform within ±3 degrees (positive turns the page anticlockwise), and JPEG
quality 50–75 for pages stored as JPEG (in PDF and .jpg files; PNG and TIFF pages are lossless
and their quality is null). A document's file format is drawn once it is paginated: a one-page
document is an image-only PDF, a multi-page TIFF, a PNG or a JPEG; a longer one is a PDF or a
TIFF, so every document is one file.

`OUT_DIR/manifest.jsonl` has one line per page: the scan (relative to OUT_DIR), page number,
source, page type and the text printed on the page.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import shutil
import sys
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import msgspec
import pypdfium2 as pdfium
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from kb_eval.question_sets import holds_answer
from kb_pipeline.parsing import ParseError, parse_document

__all__ = [
    "A4_INCHES",
    "FONT_FILES",
    "FontMissingError",
    "PageMix",
    "PageRender",
    "PageType",
    "ScanPage",
    "find_cjk_font",
    "main",
    "render_document",
    "render_pages",
]

A4_INCHES = (8.27, 11.69)
FONT_FILES = (
    Path("/usr/share/fonts/opentype/noto/NotoSerifCJK-Regular.ttc"),
    Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"),
)
_POINT_SIZE = 10.5
_MARGIN = 56.7  # points: 20 mm
_LINE_PITCH = 1.7  # of the point size, between horizontal lines
_COLUMN_PITCH = 1.8  # of the point size, between vertical columns
# The vertical presentation forms: NFKC maps each back to its horizontal form.
_VERTICAL_FORMS = str.maketrans(
    "、。，：；！？「」『』（）【】〔〕〈〉《》［］｛｝…‥",
    "︑︒︐︓︔︕︖﹁﹂﹃﹄︵︶︻︼︹︺︿﹀︽︾﹇﹈︷︸︙︰",
)
# Drawn turned a quarter clockwise in a column, as vertical typesetting does.
_TURNED_IN_COLUMNS = frozenset("ー－—―‐-～~=＝()[]<>")
_SKIPPED_SUFFIXES = {".xlsx": "a spreadsheet"}
_SINGLE_PAGE_FORMATS = (("pdf", "tiff", "png", "jpeg"), (4, 2, 2, 2))
_MULTI_PAGE_FORMATS = (("pdf", "tiff"), (7, 3))
_SUFFIX = {"pdf": ".pdf", "tiff": ".tiff", "png": ".png", "jpeg": ".jpg"}


class FontMissingError(RuntimeError):
    """No Japanese font to render pages with."""


class PageType(msgspec.Struct, frozen=True):
    """How one page was printed and scanned; `rotation` is clockwise degrees."""

    dpi: int = 200
    vertical: bool = False
    rotation: int = 0
    skew: float = 0.0
    jpeg_quality: int | None = None


@dataclass(frozen=True)
class PageRender:
    """One rendered page: its image and the text printed on it (paragraphs end in a newline)."""

    image: Image.Image
    text: str
    page_type: PageType


class ScanPage(msgspec.Struct, frozen=True):
    """One line of manifest.jsonl."""

    scan: str
    page: int
    source: str
    dpi: int
    vertical: bool
    rotation: int
    skew: float
    jpeg_quality: int | None
    text: str


class PageMix:
    """Draws page types in the shares of issue 44, exact over every bag's length."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._bags: dict[str, list] = {}

    def _draw(self, name: str, contents: Sequence) -> object:
        bag = self._bags.setdefault(name, [])
        if not bag:
            bag.extend(contents)
            self._rng.shuffle(bag)
        return bag.pop()

    def next(self) -> PageType:
        """The next page's type."""
        turned = self._draw("turned", [True] + [False] * 9)
        return PageType(
            dpi=self._draw("dpi", [150, 200, 300]),
            vertical=self._draw("vertical", [True] * 3 + [False] * 7),
            rotation=self._rng.choice((90, 180, 270)) if turned else 0,
            skew=round(self._rng.uniform(-3.0, 3.0), 2),
            jpeg_quality=self._rng.randint(50, 75),
        )


def find_cjk_font(candidates: Sequence[Path] = FONT_FILES) -> tuple[Path, int]:
    """The first font file among `candidates` with a Japanese face, and that face's index."""
    for path in candidates:
        if not path.is_file():
            continue
        for index in range(16):
            try:
                name = ImageFont.truetype(str(path), 10, index=index).getname()[0] or ""
            except OSError:
                break
            if name.endswith(" JP") and "Mono" not in name:
                return path, index
    looked = ", ".join(str(p) for p in candidates) or "no files"
    raise FontMissingError(
        f"no Japanese font to render scans with (looked in {looked}): "
        "install the Debian package fonts-noto-cjk"
    )


@cache
def _font(path: Path, index: int, pixels: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(path), pixels, index=index)


def render_pages(
    text: str,
    *,
    vertical: bool = False,
    dpi: int = 200,
    rotation: int = 0,
    skew: float = 0.0,
    jpeg_quality: int | None = None,
    page_size: tuple[float, float] = A4_INCHES,
    seed: int = 0,
    font_files: Sequence[Path] = FONT_FILES,
) -> list[PageRender]:
    """`text` printed on pages that all share one page type."""
    page_type = PageType(dpi, vertical, rotation, skew, jpeg_quality)
    return render_document(text, lambda: page_type, page_size=page_size, seed=seed,
                           font_files=font_files)


def render_document(
    text: str,
    next_type: Callable[[], PageType],
    *,
    page_size: tuple[float, float] = A4_INCHES,
    seed: int = 0,
    font_files: Sequence[Path] = FONT_FILES,
    max_pages: int | None = None,
) -> list[PageRender]:
    """`text` printed page by page, each page of the type `next_type()` gives as it is begun.

    Each line of `text` is a paragraph (blank ones are dropped); it starts a new line and wraps
    at the margin. Noise is drawn from `seed` and the page number, so it is the same every run.
    """
    font = find_cjk_font(font_files)
    width, height = page_size[0] * 72, page_size[1] * 72
    paragraphs = deque(p.replace("\t", " ") for p in text.splitlines() if p.strip())
    pages: list[PageRender] = []
    while paragraphs and (max_pages is None or len(pages) < max_pages):
        page_type = next_type()
        lines = _fill_page(paragraphs, font, width, height, page_type.vertical)
        draw = _draw_vertical if page_type.vertical else _draw_horizontal
        image = draw(lines, font, width, height, page_type.dpi)
        image = _scanned(image, page_type, random.Random(f"{seed}:{len(pages)}"))
        printed = "".join(line + ("\n" if ends else "") for line, ends in lines)
        pages.append(PageRender(image, printed, page_type))
    return pages


def _advance(char: str, font: tuple[Path, int], vertical: bool) -> float:
    """Points `char` takes along a line: one em in a column, its own width in a row."""
    return _POINT_SIZE if vertical else _font(*font, 100).getlength(char) * _POINT_SIZE / 100


def _fill_page(paragraphs: deque[str], font: tuple[Path, int], width: float, height: float,
               vertical: bool) -> list[tuple[str, bool]]:
    """Takes one page's lines off `paragraphs`: (text, whether it ends its paragraph)."""
    pitch = _POINT_SIZE * (_COLUMN_PITCH if vertical else _LINE_PITCH)
    across, along = (width, height) if vertical else (height, width)
    room, capacity = along - 2 * _MARGIN, max(1, int((across - 2 * _MARGIN) // pitch))
    lines: list[tuple[str, bool]] = []
    while paragraphs and len(lines) < capacity:
        paragraph, used, cut = paragraphs.popleft(), 0.0, 0
        while cut < len(paragraph):
            used += _advance(paragraph[cut], font, vertical)
            if used > room and cut:
                break
            cut += 1
        if cut < len(paragraph):
            paragraphs.appendleft(paragraph[cut:])
        lines.append((paragraph[:cut], cut == len(paragraph)))
    return lines


def _draw_horizontal(lines: list[tuple[str, bool]], font: tuple[Path, int], width: float,
                     height: float, dpi: int) -> Image.Image:
    scale = dpi / 72
    image = Image.new("L", (round(width * scale), round(height * scale)), 255)
    draw, face = ImageDraw.Draw(image), _font(*font, round(_POINT_SIZE * scale))
    for row, (line, _) in enumerate(lines):
        x, baseline = _MARGIN, _MARGIN + _POINT_SIZE * (_LINE_PITCH * row + 0.88)
        for char in line:
            draw.text((x * scale, baseline * scale), char, font=face, fill=0, anchor="ls")
            x += _advance(char, font, vertical=False)
    return image


def _draw_vertical(lines: list[tuple[str, bool]], font: tuple[Path, int], width: float,
                   height: float, dpi: int) -> Image.Image:
    scale = dpi / 72
    image = Image.new("L", (round(width * scale), round(height * scale)), 255)
    draw, pixels = ImageDraw.Draw(image), round(_POINT_SIZE * scale)
    face = _font(*font, pixels)
    for column, (line, _) in enumerate(lines):
        x = width - _MARGIN - _POINT_SIZE * (_COLUMN_PITCH * column + 0.5)
        for row, char in enumerate(line):
            centre = (x * scale, (_MARGIN + _POINT_SIZE * (row + 0.5)) * scale)
            if char in _TURNED_IN_COLUMNS:
                _paste_turned(image, char, face, centre, pixels)
            else:
                draw.text(centre, char.translate(_VERTICAL_FORMS), font=face, fill=0, anchor="mm")
    return image


def _paste_turned(image: Image.Image, char: str, face: ImageFont.FreeTypeFont,
                  centre: tuple[float, float], pixels: int) -> None:
    """Draws `char` turned a quarter clockwise, centred on `centre`."""
    cell = Image.new("L", (pixels * 2, pixels * 2), 0)
    ImageDraw.Draw(cell).text((pixels, pixels), char, font=face, fill=255, anchor="mm")
    cell = cell.rotate(-90)
    image.paste(0, (round(centre[0]) - pixels, round(centre[1]) - pixels), cell)


def _scanned(image: Image.Image, page_type: PageType, rng: random.Random) -> Image.Image:
    """`image` as a scanner returns it: softened, specked, skewed, turned, JPEG-compressed."""
    image = image.filter(ImageFilter.GaussianBlur(page_type.dpi / 400))
    draw = ImageDraw.Draw(image)
    for _ in range(image.width * image.height // 20000):
        x, y = rng.randrange(image.width), rng.randrange(image.height)
        draw.point((x, y), fill=rng.randint(80, 200))
    if page_type.skew:
        image = image.rotate(page_type.skew, Image.Resampling.BICUBIC, fillcolor=255)
    if page_type.rotation:
        image = image.rotate(-page_type.rotation, expand=True)
    if page_type.jpeg_quality is not None:
        image = Image.open(io.BytesIO(_jpeg(image, page_type.jpeg_quality)))
        image.load()
    return image


def _jpeg(image: Image.Image, quality: int) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def _write_scan(pages: list[PageRender], file_format: str, path: Path) -> None:
    """Writes `pages` as one file; their dpi is recorded, JPEG pages at their own quality."""
    path.parent.mkdir(parents=True, exist_ok=True)
    first = pages[0]
    if file_format == "pdf":
        pdf = pdfium.PdfDocument.new()
        for page in pages:
            _add_pdf_page(pdf, page)
        pdf.save(str(path))
    elif file_format == "tiff":
        # Each frame's own encoderinfo carries its dpi: the pages of one scan may differ.
        for page in pages[1:]:
            page.image.encoderinfo = {"dpi": (page.page_type.dpi,) * 2}
        first.image.save(path, "TIFF", save_all=True, append_images=[p.image for p in pages[1:]],
                         dpi=(first.page_type.dpi,) * 2, compression="tiff_deflate")
    elif file_format == "png":
        first.image.save(path, "PNG", dpi=(first.page_type.dpi,) * 2)
    else:
        first.image.save(path, "JPEG", dpi=(first.page_type.dpi,) * 2,
                         quality=first.page_type.jpeg_quality)


def _add_pdf_page(pdf: pdfium.PdfDocument, page: PageRender) -> None:
    scale = 72 / page.page_type.dpi
    width, height = page.image.width * scale, page.image.height * scale
    pdf_page = pdf.new_page(width, height)
    picture = pdfium.PdfImage.new(pdf)
    # The JPEG bytes are embedded as they are (DCTDecode): one lossy pass, at the page's quality.
    picture.load_jpeg(io.BytesIO(_jpeg(page.image, page.page_type.jpeg_quality or 75)), inline=True)
    picture.set_matrix(pdfium.PdfMatrix().scale(width, height))
    pdf_page.insert_obj(picture)
    pdf_page.gen_content()


def _document_text(name: str, data: bytes) -> str:
    """The text a printout of the file shows: one line per block, headings on their own."""
    return "\n".join(block.text for block in parse_document(name, data).blocks)


def _scan_document(text: str, source: str, scan_stem: Path, out_dir: Path, mix: PageMix,
                   rng: random.Random, max_pages: int | None, seed: int) -> list[ScanPage]:
    """Renders and writes one document's scan; its manifest lines."""
    # Pages are rendered lossless; the drawn quality is applied once, when a format stores JPEG.
    drawn: list[PageType] = []

    def next_type() -> PageType:
        drawn.append(mix.next())
        return msgspec.structs.replace(drawn[-1], jpeg_quality=None)

    pages = render_document(text, next_type, seed=seed, max_pages=max_pages)
    formats, weights = _MULTI_PAGE_FORMATS if len(pages) > 1 else _SINGLE_PAGE_FORMATS
    file_format = rng.choices(formats, weights)[0]
    lossy = file_format in ("pdf", "jpeg")
    pages = [PageRender(p.image, p.text, t if lossy else msgspec.structs.replace(
        t, jpeg_quality=None)) for p, t in zip(pages, drawn, strict=True)]
    scan = scan_stem.with_suffix(_SUFFIX[file_format])
    _write_scan(pages, file_format, out_dir / scan)
    return [ScanPage(scan.as_posix(), number, source, p.page_type.dpi, p.page_type.vertical,
                     p.page_type.rotation, p.page_type.skew, p.page_type.jpeg_quality, p.text)
            for number, p in enumerate(pages, 1)]


def scan_samples(docs: Path, out_dir: Path, mix: PageMix, rng: random.Random,
                 max_pages: int | None, seed: int) -> list[ScanPage]:
    """Scans of every readable document under `docs`, with their folders' access files."""
    manifest: list[ScanPage] = []
    written: set[Path] = set()
    for path in sorted(p for p in docs.rglob("*") if p.is_file()):
        relative = path.relative_to(docs)
        if path.name == "_access.toml":
            (out_dir / "samples" / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out_dir / "samples" / relative)
            continue
        if path.suffix.lower() in _SKIPPED_SUFFIXES:
            print(f"skipped {relative}: {_SKIPPED_SUFFIXES[path.suffix.lower()]}", file=sys.stderr)
            continue
        try:
            text = _document_text(path.name, path.read_bytes())
        except ParseError as err:
            print(f"skipped {relative}: {err}", file=sys.stderr)
            continue
        stem = Path("samples") / relative.with_suffix("")
        if stem in written:
            raise ValueError(f"two documents would share the scan name {stem}: rename one")
        written.add(stem)
        manifest += _scan_document(text, f"samples/{relative.as_posix()}", stem, out_dir, mix,
                                   rng, max_pages, seed)
    return manifest


def choose_articles(questions: list[dict], articles: int, rng: random.Random) -> list[str]:
    """`articles` article names drawn from the 2×`articles` with most answerable questions."""
    counts = Counter(q["expected_source"] for q in questions if q.get("answerable", True))
    ranked = sorted(counts, key=lambda name: (-counts[name], name))[: 2 * articles]
    return sorted(rng.sample(ranked, min(articles, len(ranked))))


def scan_jaquad(jaquad: Path, articles: int, out_dir: Path, mix: PageMix, rng: random.Random,
                max_pages: int | None, seed: int) -> list[ScanPage]:
    """Scans of the chosen JaQuAD articles, their texts and the two question files."""
    with open(jaquad / "eval.jsonl", encoding="utf-8") as lines:
        questions = [json.loads(line) for line in lines if line.strip()]
    chosen = choose_articles(questions, articles, rng)
    (out_dir / "jaquad_text").mkdir(parents=True, exist_ok=True)
    manifest: list[ScanPage] = []
    scan_names: dict[str, str] = {}
    for name in chosen:
        source = jaquad / "docs" / name
        shutil.copyfile(source, out_dir / "jaquad_text" / name)
        pages = _scan_document(_document_text(name, source.read_bytes()), f"jaquad/{name}",
                               Path("jaquad") / Path(name).stem, out_dir, mix, rng, max_pages,
                               seed)
        scan_names[name] = Path(pages[0].scan).name
        manifest += pages
    by_article: dict[str, list[ScanPage]] = {}
    for page in manifest:
        by_article.setdefault(page.source.removeprefix("jaquad/"), []).append(page)
    # Each question is reported by the type of the page its answer is printed on (kb eval's
    # figures by question_type), in both files, so scans and text compare type by type.
    asked = [{**q, "question_type": _answer_page_type(q["answer"],
                                                      by_article[q["expected_source"]])}
             for q in questions
             if q.get("answerable", True) and q["expected_source"] in scan_names]
    _write_jsonl(out_dir / "jaquad_text_eval.jsonl", asked)
    _write_jsonl(out_dir / "jaquad_eval.jsonl",
                 [{**q, "expected_source": scan_names[q["expected_source"]]} for q in asked])
    return manifest


def _answer_page_type(answer: str, pages: list[ScanPage]) -> str:
    """The type of the first page that prints `answer` whole: horizontal, vertical or turned
    (scanned sideways or upside down); "across pages" when a page break cuts it."""
    for page in pages:
        if holds_answer(page.text, answer):  # as kb eval tells a passage that holds it
            if page.rotation:
                return "turned"
            return "vertical" if page.vertical else "horizontal"
    return "across pages"


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv: list[str]) -> int:
    """Write the scans and their manifest; 0 on success, 2 when no font or no sources."""
    parser = argparse.ArgumentParser(prog="python -m kb_eval.scan_set",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="where scans and manifest are written")
    parser.add_argument("--samples", type=Path, help="a folder of company documents")
    parser.add_argument("--jaquad", type=Path, help="the JaQuAD development set's folder")
    parser.add_argument("--articles", type=int, default=15, help="JaQuAD articles to scan")
    parser.add_argument("--max-pages", type=int, help="keep each document's first N pages")
    parser.add_argument("--seed", type=int, default=44, help="the seed of every draw")
    args = parser.parse_args(argv)
    if not (args.samples or args.jaquad):
        parser.error("name --samples, --jaquad or both")
    rng = random.Random(args.seed)
    mix = PageMix(rng)
    manifest: list[ScanPage] = []
    try:
        if args.samples:
            manifest += scan_samples(args.samples, args.out_dir, mix, rng, args.max_pages,
                                     args.seed)
        if args.jaquad:
            manifest += scan_jaquad(args.jaquad, args.articles, args.out_dir, mix, rng,
                                    args.max_pages, args.seed)
    except FontMissingError as err:
        print(f"scans: {err}", file=sys.stderr)
        return 2
    with open(args.out_dir / "manifest.jsonl", "wb") as out:
        for page in manifest:
            out.write(msgspec.json.encode(page) + b"\n")
    scans = len({page.scan for page in manifest})
    print(f"{scans} scans, {len(manifest)} pages written to {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
