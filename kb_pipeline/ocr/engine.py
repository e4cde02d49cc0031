"""The OCR engine: Tesseract 5 with Debian's Japanese models finds the page's lines, PP-OCR's
recognizer reads their characters; Tesseract a program run for each pass over a page, the
recognizer a child process kept from page to page.

Separate processes, not libraries in ours: a page that takes too long is killed at its deadline
(a library call cannot be interrupted), a crash fails one page, and both run at low priority
with one thread, so searches and text documents keep the cores. A page is read as it lies
first; orientation detection (`osd`) turns one that reads unsure (scanned sideways or upside
down), the page is straightened
(kb_pipeline.ocr.layout), `jpn` finds and reads rows or `jpn_vert` columns (縦書き), and the
recognizer reads each line again (kb_pipeline.ocr.lines). Chosen by measurement: docs/ocr.md.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from PIL import Image

from kb_pipeline.ocr.layout import Layout, page_layouts
from kb_pipeline.ocr.lines import layout_lines, page_text
from kb_pipeline.ocr.recognizer import model_files

__all__ = [
    "EngineMissing",
    "OcrError",
    "OcrResult",
    "engine_identity",
    "missing_engine",
    "read_image",
]

# What `apt-get install` needs for the engine and its models (docs/ocr.md, .ci/run, docker/).
_DEBIAN_PACKAGES = ("tesseract-ocr", "tesseract-ocr-jpn", "tesseract-ocr-jpn-vert")
_LANGUAGES = ("jpn", "jpn_vert", "osd")
# How a page is prepared and which model reads it: part of the cache key with the engine's own
# version, so a change here reads pages anew. 3: straightened, one model per writing direction,
# each turn tried where orientation detection cannot judge; 4: rows read as one block;
# 5: both directions read where the layout cannot tell; 6: lines read again by PP-OCR;
# 7: paragraphs where lines stand further apart, not where Tesseract says; 8: a page read as
# it lies first, orientation detection only when that reading is unsure.
_METHOD = "8"
# Orientation is trusted only above this confidence: OSD guesses on pages with little text.
_MIN_ORIENTATION_CONFIDENCE = 2.0
# Turns tried on a page orientation detection cannot judge, most likely first, until a reading's
# mean word confidence reaches _CONFIDENT. An upside-down or sideways reading stays far below:
# read as they lay, the generated scans' turned pages scored 15-28, their upright ones 86-93.
_TURNS = (0, 180, 90, 270)
_CONFIDENT = 80.0
_ROTATE = re.compile(r"^Rotate: (\d+)", re.MULTILINE)
_ORIENTATION_CONFIDENCE = re.compile(r"^Orientation confidence: ([\d.]+)", re.MULTILINE)


class OcrError(Exception):
    """A page the engine could not read; the message says why, for the failures table."""


class EngineMissing(OcrError):
    """The engine or one of its models is not installed: documents wait for it."""


class _PageTimeout(OcrError):
    """The page's time (KB_OCR_PAGE_TIMEOUT_S) ran out."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"reading the page took over {seconds:g} s (KB_OCR_PAGE_TIMEOUT_S)")


@dataclass(frozen=True)
class OcrResult:
    """What the engine read on one page: its text (lines as it gave them), the mean word
    confidence (0–100, None without words), whether it was 縦書き, and the clockwise turn that
    righted it."""

    text: str
    confidence: float | None
    vertical: bool
    rotation: int


def missing_engine() -> str | None:
    """What of the engine is not installed (the program, or models by name) and how to install
    it; None when it is ready. Not cached: the sensor asks on every tick, so an engine installed
    meanwhile is found."""
    if _tesseract() is None:
        missing = ["tesseract"]
    else:
        missing = [lang for lang in _LANGUAGES if lang not in _models()[1]]
    if not missing:
        return None
    return (f"the OCR engine is not installed ({', '.join(missing)} missing): "
            f"apt-get install {' '.join(_DEBIAN_PACKAGES)}")


@functools.cache
def engine_identity() -> str:
    """The engine's version and a digest of its models: part of each cached page's key, so an
    upgraded engine or model reads pages anew."""
    _require()
    version = _run([_tesseract_path(), "--version"]).stdout.splitlines()[0]
    digest = hashlib.sha256()
    folder = _models()[0]
    models = {lang: folder / f"{lang}.traineddata" for lang in _LANGUAGES}
    models["lines"], models["characters"] = model_files()
    for name, model in models.items():
        # A model's size and head tell its versions apart without reading megabytes each time
        # a process starts.
        with model.open("rb") as fh:
            digest.update(f"{name}:{model.stat().st_size}:".encode() + fh.read(2**16))
    return (f"{version.strip()} {'+'.join(_LANGUAGES)}+PP-OCRv6@{digest.hexdigest()[:12]} "
            f"method={_METHOD}")


def read_image(image: Image.Image, timeout_s: float) -> OcrResult:
    """Read one page image (any size the limits allowed) within `timeout_s` seconds in all:
    turned upright, straightened, then read with the model of its writing direction (`jpn` in
    rows, `jpn_vert` in columns). A page is read as it lies first, and kept when that reading
    is confident: most scans are fed upright, and this spares them orientation detection.
    Otherwise orientation detection turns it; on a page it cannot judge (it needs a page of
    text), each turn is read until one reads confidently. A page whose direction the layout
    cannot tell is read both ways. The most confident reading is kept."""
    _require()
    deadline = _Deadline(timeout_s)
    with tempfile.TemporaryDirectory(prefix="kb-ocr-") as tmp:
        folder = Path(tmp)
        readings: list[_Reading] = []

        def read_turned(turn: int) -> bool:
            """Whether a reading of the page turned by `turn` is confident."""
            upright = image.rotate(-turn, expand=True, fillcolor=255) if turn else image
            for layout in page_layouts(upright):
                readings.append(_read_upright(upright, turn, layout,
                                              folder / f"reading{len(readings)}", deadline))
            return max(reading.confidence or 0 for reading in readings) >= _CONFIDENT

        if not read_turned(0):
            _save(image, folder / "page.png")
            rotation = _orientation(folder / "page.png", deadline)
            for turn in [rotation] if rotation is not None else _TURNS:
                if turn and read_turned(turn):
                    break
        return _recognized(max(readings, key=lambda reading: reading.confidence or 0),
                           deadline)


def _save(image: Image.Image, path: Path) -> None:
    # Little compression: the file lives for a page, and full compression took 0.12 s of an
    # A4 page at 300 dpi (0.07 s at level 1).
    image.save(path, compress_level=1)


@dataclass(frozen=True)
class _Reading:
    """Tesseract's reading of the straightened page: its lines, where they are, how sure."""

    page: Path
    tsv: str
    confidence: float | None
    vertical: bool
    rotation: int


def _read_upright(upright: Image.Image, turn: int, layout: Layout, stem: Path,
                  deadline: _Deadline) -> _Reading:
    """The upright page straightened and read in the writing direction of `layout`."""
    deadline.left()
    page = stem.with_suffix(".png")
    _save(upright.rotate(layout.skew, resample=Image.Resampling.BICUBIC, expand=True,
                         fillcolor=255), page)
    # Rows as one block of lines (--psm 6): a table's row stays one line, and it found the
    # lines better than full layout analysis (--psm 3) on generated scans (docs/ocr.md).
    model = ["-l", "jpn_vert", "--psm", "5"] if layout.vertical else ["-l", "jpn", "--psm", "6"]
    _run([_tesseract_path(), str(page), str(stem), *model, "tsv"], deadline)
    tsv = stem.with_suffix(".tsv").read_text(encoding="utf-8", errors="replace")
    return _Reading(page=page, tsv=tsv, confidence=_confidence(tsv), vertical=layout.vertical,
                    rotation=turn)


def _recognized(reading: _Reading, deadline: _Deadline) -> OcrResult:
    """The chosen reading's lines read again by PP-OCR's recognizer, in a child process."""
    with Image.open(reading.page) as page:
        lines = layout_lines(reading.tsv, reading.vertical, page)
    boxes = [[*segment.box, reading.vertical] for line in lines for segment in line.segments]
    texts = [text for text, _ in _RECOGNIZER.read(reading.page, boxes, deadline)] if boxes else []
    return OcrResult(text=page_text(lines, texts, reading.vertical),
                     confidence=reading.confidence, vertical=reading.vertical,
                     rotation=reading.rotation)


# Not `-m kb_pipeline.ocr.recognizer`: the package imports that module before runpy would run
# it, and Python warns so on stderr, where a failure's message is looked for.
_SERVE = "from kb_pipeline.ocr.recognizer import serve; serve()"


class _LineRecognizer:
    """The worker's line recognizer (kb_pipeline.ocr.recognizer): a child process started for
    the first page and kept for the next, killed when a page's time runs out, and started
    afresh for the page after it or after a failure. One page at a time goes through it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: subprocess.Popen[str] | None = None
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._errors: collections.deque[str | None] = collections.deque(maxlen=3)
        self._errors_read = threading.Thread()

    def read(self, page: Path, boxes: list[list[int | bool]],
             deadline: _Deadline) -> list[tuple[str, float]]:
        with self._lock:
            # Taken before the request is sent: a page whose time is gone sends none, so no
            # answer is left behind for the next page to take.
            wait = deadline.left()
            child = self._running()
            assert child.stdin is not None
            try:
                child.stdin.write(json.dumps([str(page), boxes]) + "\n")
                child.stdin.flush()
            except OSError:
                pass  # it has ended: its answer is None, and stderr says why
            try:
                answer = self._answers.get(timeout=wait)
            except queue.Empty:
                child.kill()
                child.wait()
                raise _PageTimeout(deadline.seconds) from None
            if answer is None:
                raise OcrError(f"the line recognizer failed: {self._why_it_ended(child)}")
            return [(text, confidence) for text, confidence in json.loads(answer)]

    def _running(self) -> subprocess.Popen[str]:
        if self._child is not None and self._child.poll() is None:
            return self._child
        env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
        try:
            child = subprocess.Popen(
                [sys.executable, "-c", _SERVE], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
                errors="replace", env=env, preexec_fn=_lower_priority)
        except OSError as exc:
            raise EngineMissing(f"cannot run the line recognizer: {exc.strerror or exc}") from exc
        self._child, self._answers, self._errors = child, queue.Queue(), collections.deque(maxlen=3)
        threading.Thread(target=_forward, args=(child.stdout, self._answers.put),
                         name="line-recognizer-answers", daemon=True).start()
        self._errors_read = threading.Thread(
            target=_forward, args=(child.stderr, self._errors.append),
            name="line-recognizer-errors", daemon=True)
        self._errors_read.start()
        return child

    def _why_it_ended(self, child: subprocess.Popen[str]) -> str:
        """The last line the child wrote to stderr, or its exit status."""
        status = child.wait()
        self._errors_read.join(timeout=5)
        last = [line.strip() for line in self._errors if line and line.strip()]
        return last[-1] if last else f"exit {status}, no message"


def _forward(stream: IO[str], into: Callable[[str | None], None]) -> None:
    """A child's stream, a line at a time, then None once it has ended."""
    for line in stream:
        into(line)
    into(None)


_RECOGNIZER = _LineRecognizer()


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def left(self) -> float:
        left = self._end - time.monotonic()
        if left <= 0:
            raise _PageTimeout(self.seconds)
        return left


def _orientation(page: Path, deadline: _Deadline) -> int | None:
    """The clockwise rotation (0, 90, 180, 270) that rights the page; None when orientation
    detection is unsure, or finds too little text to judge (it then exits with an error)."""
    try:
        found = _run([_tesseract_path(), str(page), "-", "--psm", "0"], deadline)
    except _PageTimeout:
        raise
    except OcrError:
        return None
    rotate = _ROTATE.search(found.stdout)
    confidence = _ORIENTATION_CONFIDENCE.search(found.stdout)
    if rotate is None or confidence is None:
        return None
    if float(confidence.group(1)) < _MIN_ORIENTATION_CONFIDENCE:
        return None
    return int(rotate.group(1)) % 360


def _confidence(tsv: str) -> float | None:
    """Mean confidence of the page's words, weighted by their characters."""
    weighted = chars = 0.0
    for row in tsv.splitlines()[1:]:
        cells = row.split("\t")
        if len(cells) < 12 or cells[0] != "5" or not cells[11].strip() or float(cells[10]) < 0:
            continue
        weighted += float(cells[10]) * len(cells[11].strip())
        chars += len(cells[11].strip())
    return round(weighted / chars, 1) if chars else None


def _run(command: list[str], deadline: _Deadline | None = None
         ) -> subprocess.CompletedProcess[str]:
    """Run tesseract within what is left of a page's `deadline` (else 30 s: a question to it,
    such as its version, answers at once)."""
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}  # one core: searches keep the other
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=deadline.left() if deadline else 30, env=env,
                              preexec_fn=_lower_priority, check=False)
    except subprocess.TimeoutExpired as exc:
        if deadline is None:
            raise OcrError(f"tesseract did not answer within {exc.timeout:g} s") from exc
        raise _PageTimeout(deadline.seconds) from exc
    except OSError as exc:
        raise EngineMissing(f"cannot run tesseract: {exc.strerror or exc}") from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise OcrError(f"tesseract failed (exit {done.returncode}): "
                       f"{detail[-1] if detail else 'no message'}")
    return done


def _lower_priority() -> None:
    os.nice(10)


def _require() -> None:
    if missing := missing_engine():
        raise EngineMissing(missing)


def _tesseract() -> str | None:
    return shutil.which("tesseract")


def _tesseract_path() -> str:
    path = _tesseract()
    if path is None:
        raise EngineMissing("tesseract is not installed")
    return path


def _models() -> tuple[Path, frozenset[str]]:
    """Where the engine keeps its models, and the languages it has there."""
    head, *langs = _run([_tesseract_path(), "--list-langs"]).stdout.splitlines()
    folder = re.search(r'"(.+?)"', head)
    if folder is None:
        raise EngineMissing(f"cannot tell where tesseract keeps its models: {head}")
    return Path(folder.group(1)), frozenset(lang.strip() for lang in langs if lang.strip())
