"""The OCR engine: Tesseract 5 with Debian's Japanese models, run as a program per page.

A separate process per page, not a library in ours: a page that takes too long is killed at
its deadline (a library call cannot be interrupted), a crash in the engine fails one page, and
the engine runs at low priority with one thread, so searches and text documents keep the cores.
`jpn+jpn_vert` reads horizontal and 縦書き blocks on one page; orientation detection (`osd`)
turns a page scanned sideways or upside down first. Chosen by measurement: docs/ocr.md.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

__all__ = [
    "DEBIAN_PACKAGES",
    "EngineMissing",
    "OcrError",
    "OcrResult",
    "engine_identity",
    "missing_parts",
    "read_image",
]

# What `apt-get install` needs for the engine and its models (docs/ocr.md, .ci/run, docker/).
DEBIAN_PACKAGES = ("tesseract-ocr", "tesseract-ocr-jpn", "tesseract-ocr-jpn-vert")
_LANGUAGES = ("jpn", "jpn_vert", "osd")
# Orientation is trusted only above this confidence: OSD guesses on pages with little text.
_MIN_ORIENTATION_CONFIDENCE = 2.0
_ROTATE = re.compile(r"^Rotate: (\d+)", re.MULTILINE)
_ORIENTATION_CONFIDENCE = re.compile(r"^Orientation confidence: ([\d.]+)", re.MULTILINE)


class OcrError(Exception):
    """A page the engine could not read; the message says why, for the failures table."""


class EngineMissing(OcrError):
    """The engine or one of its models is not installed: documents wait for it."""


@dataclass(frozen=True)
class OcrResult:
    """What the engine read on one page: its text (lines; a blank line between paragraphs),
    the mean word confidence (0–100, None without words) and whether it was 縦書き."""

    text: str
    confidence: float | None
    vertical: bool
    rotation: int


def missing_parts() -> list[str]:
    """What of the engine is not installed: the program, or models by name (empty: ready)."""
    if _tesseract() is None:
        return ["tesseract"]
    return [lang for lang in _LANGUAGES if lang not in _installed_languages()]


@functools.cache
def engine_identity() -> str:
    """The engine's version and a digest of its models: part of each cached page's key, so an
    upgraded engine or model reads pages anew."""
    _require()
    version = _run([_tesseract_path(), "--version"], timeout_s=30).stdout.splitlines()[0]
    digest = hashlib.sha256()
    for lang in _LANGUAGES:
        digest.update(_model_path(lang).read_bytes())
    return f"{version.strip()} {'+'.join(_LANGUAGES)}@{digest.hexdigest()[:12]}"


def read_image(image: Image.Image, timeout_s: float) -> OcrResult:
    """Read one page image (any size the limits allowed) within `timeout_s` seconds in all."""
    _require()
    with tempfile.TemporaryDirectory(prefix="kb-ocr-") as tmp:
        page = Path(tmp) / "page.png"
        image.save(page)
        deadline = _Deadline(timeout_s)
        rotation = _orientation(page, deadline)
        if rotation:
            # OSD's "Rotate: 90" is the clockwise turn that rights the page.
            image.rotate(-rotation, expand=True, fillcolor=255).save(page)
        out = Path(tmp) / "out"
        _run([_tesseract_path(), str(page), str(out), "-l", "jpn+jpn_vert", "--psm", "3",
              "-c", "preserve_interword_spaces=1", "txt", "tsv"], timeout_s=deadline.left())
        text = out.with_suffix(".txt").read_text(encoding="utf-8", errors="replace")
        confidence, vertical = _words(out.with_suffix(".tsv").read_text(encoding="utf-8",
                                                                        errors="replace"))
    return OcrResult(text=text, confidence=confidence, vertical=vertical, rotation=rotation)


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def left(self) -> float:
        left = self._end - time.monotonic()
        if left <= 0:
            raise OcrError(f"reading the page took over {self.seconds:g} s "
                           "(KB_OCR_PAGE_TIMEOUT_S)")
        return left


def _orientation(page: Path, deadline: _Deadline) -> int:
    """The clockwise rotation (0, 90, 180, 270) that rights the page; 0 when OSD is unsure or
    finds too little text to judge (it then exits with an error of its own)."""
    try:
        found = _run([_tesseract_path(), str(page), "-", "--psm", "0"], timeout_s=deadline.left())
    except OcrError as exc:
        if "took over" in str(exc):
            raise
        return 0
    rotate = _ROTATE.search(found.stdout)
    confidence = _ORIENTATION_CONFIDENCE.search(found.stdout)
    if rotate is None or confidence is None:
        return 0
    if float(confidence.group(1)) < _MIN_ORIENTATION_CONFIDENCE:
        return 0
    return int(rotate.group(1)) % 360


def _words(tsv: str) -> tuple[float | None, bool]:
    """Mean confidence of the page's words (weighted by characters) and whether most of its
    text stood in columns (lines taller than wide)."""
    weighted = chars = 0.0
    line_boxes: dict[tuple[str, ...], list[int]] = {}
    for row in tsv.splitlines()[1:]:
        cells = row.split("\t")
        if len(cells) < 12:
            continue
        level, text = cells[0], cells[11].strip()
        if level == "4":
            line_boxes[tuple(cells[2:5])] = [int(cells[8]), int(cells[9]), 0]
        if level != "5" or not text or float(cells[10]) < 0:
            continue
        weighted += float(cells[10]) * len(text)
        chars += len(text)
        box = line_boxes.get(tuple(cells[2:5]))
        if box is not None:
            box[2] += len(text)
    vertical_chars = sum(n for width, height, n in line_boxes.values() if height > 2 * width)
    confidence = round(weighted / chars, 1) if chars else None
    return confidence, chars > 0 and vertical_chars > chars / 2


def _run(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}  # one core: searches keep the other
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              env=env, preexec_fn=_lower_priority, check=False)
    except subprocess.TimeoutExpired as exc:
        raise OcrError(f"reading the page took over {exc.timeout:g} s "
                       "(KB_OCR_PAGE_TIMEOUT_S)") from exc
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
    missing = missing_parts()
    if missing:
        raise EngineMissing(
            f"OCR engine not installed ({', '.join(missing)} missing): "
            f"apt-get install {' '.join(DEBIAN_PACKAGES)}")


def _tesseract() -> str | None:
    return shutil.which("tesseract")


def _tesseract_path() -> str:
    path = _tesseract()
    if path is None:
        raise EngineMissing("tesseract is not installed")
    return path


def _installed_languages() -> frozenset[str]:
    # Not cached: the sensor asks on every tick, so models installed meanwhile are found.
    listed = _run([_tesseract_path(), "--list-langs"], timeout_s=30)
    return frozenset(line.strip() for line in listed.stdout.splitlines()[1:] if line.strip())


def _model_path(lang: str) -> Path:
    listed = _run([_tesseract_path(), "--list-langs"], timeout_s=30).stdout.splitlines()[0]
    folder = re.search(r'"(.+?)"', listed)
    if folder is None:
        raise EngineMissing(f"cannot tell where tesseract keeps its models: {listed}")
    return Path(folder.group(1)) / f"{lang}.traineddata"
