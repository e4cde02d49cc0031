"""A page's text from Tesseract's layout and PP-OCR's characters.

Tesseract finds the lines (rows, or 縦書き columns) and their words; PP-OCR's recognizer
(kb_pipeline.ocr.recognizer) reads each of them again, misreading far fewer characters
(docs/ocr.md). A row is read as segments split at wide blank gaps, so a table's cells stay
apart (three spaces between them, which the scan parser makes cells of). A column's reading is
merged with Tesseract's: the recognizer reads its kanji better but drops punctuation, long-vowel
marks and small kana set in a column, which Tesseract keeps. Paragraphs begin where lines stand
further apart than the page's usual spacing.
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image

__all__ = ["Line", "Segment", "layout_lines", "merged", "page_text"]

# A gap between two words of a row wider than this many line heights separates cells.
_CELL_GAP = 1.5
_BETWEEN_CELLS = "   "
# Dark pixels a blank stretch of a scan may hold (JPEG noise, dust), as a share of its area.
_NOISE = 0.01
# A space between two lines over this many times the page's usual one begins a paragraph.
_PARAGRAPH_GAP = 1.8


Box = tuple[int, int, int, int]  # left, top, width, height


@dataclass(frozen=True)
class Segment:
    """What the recognizer reads once: a row's stretch between wide gaps, or a whole column;
    with Tesseract's own reading of it."""

    box: Box
    tesseract: str


@dataclass(frozen=True)
class Line:
    """One row or column Tesseract found, in reading order."""

    segments: tuple[Segment, ...]

    def span(self, vertical: bool) -> tuple[int, int]:
        """Where the line starts and ends across the lines: top to bottom of a row, left to
        right of a column."""
        axis = 0 if vertical else 1
        return (min(s.box[axis] for s in self.segments),
                max(s.box[axis] + s.box[axis + 2] for s in self.segments))


def layout_lines(tsv: str, vertical: bool, page: Image.Image) -> list[Line]:
    """The lines of Tesseract's TSV output (its level 5 rows are words, with their line's keys)
    on `page`, the straightened page it read."""
    lines: dict[tuple[int, int, int], list[tuple[str, Box]]] = {}
    for row in tsv.splitlines()[1:]:
        cells = row.split("\t")
        if len(cells) < 12 or cells[0] != "5" or not cells[11].strip():
            continue
        key = (int(cells[2]), int(cells[3]), int(cells[4]))
        box = (int(cells[6]), int(cells[7]), int(cells[8]), int(cells[9]))
        lines.setdefault(key, []).append((cells[11].strip(), box))
    gray = page.convert("L")
    return [Line(segments=(_segment(words),) if vertical else _cells(words, gray))
            for words in lines.values()]


def page_text(lines: list[Line], readings: list[str], vertical: bool) -> str:
    """The page's text: a line per row or column, a blank line between paragraphs. `readings`
    are the recognizer's, one per segment, in the order of `lines`."""
    breaks = _paragraph_breaks(lines, vertical)
    out: list[str] = []
    at = 0
    for index, line in enumerate(lines):
        if index in breaks:
            out.append("")
        texts = []
        for segment, reading in zip(line.segments, readings[at:], strict=False):
            reading = reading.strip()
            if vertical:
                texts.append(merged(segment.tesseract, reading))
            else:
                # A stretch the recognizer finds empty keeps Tesseract's reading, not a hole.
                texts.append(reading or segment.tesseract)
        at += len(line.segments)
        out.append(_BETWEEN_CELLS.join(texts))
    return "\n".join(out) + "\n"


def merged(tesseract: str, recognized: str) -> str:
    """A column's two readings merged, character by character as the least edits pair them:
    the recognizer's character where the two differ or only it read one; Tesseract's where
    only Tesseract read one (the marks and small kana the recognizer drops in a column).
    Tesseract's spaces in a column fall between its pieces of Japanese, not between the
    writer's words: they are not compared."""
    tesseract = tesseract.replace(" ", "")
    # Edit distances of every pair of prefixes, then walked back from the end.
    rows, cols = len(tesseract), len(recognized)
    cost = [[i + j if not i or not j else 0 for j in range(cols + 1)] for i in range(rows + 1)]
    for i in range(1, rows + 1):
        for j in range(1, cols + 1):
            cost[i][j] = min(cost[i - 1][j - 1] + (tesseract[i - 1] != recognized[j - 1]),
                             cost[i - 1][j] + 1, cost[i][j - 1] + 1)
    out: list[str] = []
    i, j = rows, cols
    while i or j:
        if i and j and cost[i][j] == cost[i - 1][j - 1] + (tesseract[i - 1] != recognized[j - 1]):
            out.append(recognized[j - 1])  # the same character, or the recognizer's reading
            i, j = i - 1, j - 1
        elif i and cost[i][j] == cost[i - 1][j] + 1:
            out.append(tesseract[i - 1])  # only Tesseract read it
            i -= 1
        else:
            out.append(recognized[j - 1])  # only the recognizer read it
            j -= 1
    return "".join(reversed(out))


def _paragraph_breaks(lines: list[Line], vertical: bool) -> set[int]:
    """The lines that begin a paragraph: those set further from the line before than lines
    usually are. Tesseract's own paragraphs are not used: on a page of widely spaced lines it
    makes each line one, and a sentence wrapped across lines would never be joined again."""
    spans = [line.span(vertical) for line in lines]
    # Columns go right to left: the space between two is the first's start less the next's end.
    gaps = [(a[0] - b[1]) if vertical else (b[0] - a[1]) for a, b in zip(spans, spans[1:],
                                                                          strict=False)]
    if not gaps:
        return set()
    usual = sorted(gaps)[(len(gaps) - 1) // 2]
    return {index + 1 for index, gap in enumerate(gaps)
            if gap > _PARAGRAPH_GAP * max(usual, 1) or gap < 0}


def _cells(words: list[tuple[str, Box]], page: Image.Image) -> tuple[Segment, ...]:
    """A row's stretches between gaps wide and blank enough to part a table's cells. A wide gap
    with ink in it holds characters Tesseract found no word in: the recognizer reads across it."""
    height = max(box[3] for _, box in words)
    top = min(box[1] for _, box in words)
    groups: list[list[tuple[str, Box]]] = [[words[0]]]
    for (_, before), word in zip(words, words[1:], strict=False):
        start, end = before[0] + before[2], word[1][0]
        if end - start > _CELL_GAP * height and _blank(page, (start, top, end, top + height)):
            groups.append([])
        groups[-1].append(word)
    return tuple(_segment(group) for group in groups)


def _blank(page: Image.Image, area: tuple[int, int, int, int]) -> bool:
    """Whether `area` of the grayscale page holds no more dark pixels than noise does."""
    dark = sum(page.crop(area).point(lambda v: 255 if v < 128 else 0).histogram()[255:])
    width, height = area[2] - area[0], area[3] - area[1]
    return dark <= _NOISE * width * height


def _segment(words: list[tuple[str, Box]]) -> Segment:
    boxes = [box for _, box in words]
    left = min(box[0] for box in boxes)
    top = min(box[1] for box in boxes)
    right = max(box[0] + box[2] for box in boxes)
    bottom = max(box[1] + box[3] for box in boxes)
    return Segment(box=(left, top, right - left, bottom - top),
                   tesseract=" ".join(word for word, _ in words))
