"""What the OCR tests need beyond Python: a Japanese font to print pages with (Debian's
fonts-noto-cjk) and the engine (tesseract-ocr with its Japanese models). Without them a test
skips, saying so, unless KB_REQUIRE_OCR=1 (as .ci/run sets after installing them): then it
fails."""

from __future__ import annotations

import os

import pytest

from kb_eval.scan_set import FontMissingError, find_cjk_font
from kb_pipeline.ocr import missing_engine

__all__ = ["need_engine", "need_font"]


def need_font() -> None:
    try:
        find_cjk_font()
    except FontMissingError as exc:
        _missing(str(exc))


def need_engine() -> None:
    need_font()
    if missing := missing_engine():
        _missing(missing)


def _missing(message: str) -> None:
    if os.environ.get("KB_REQUIRE_OCR") == "1":
        pytest.fail(f"KB_REQUIRE_OCR=1 but {message}")
    pytest.skip(message)
