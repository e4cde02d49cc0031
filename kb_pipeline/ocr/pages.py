"""Page images to read: the pages of a PDF that have no text layer, rendered, and the frames of
an image file, each checked against the limits before it is decoded or rendered."""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import pypdfium2 as pdfium
from PIL import Image, ImageSequence

from kb_core.settings import OcrSettings
from kb_pipeline.ocr.engine import OcrError

__all__ = ["IMAGE_SUFFIXES", "PageImage", "image_pages", "pdf_pages"]

# Image files read as documents of their own, and the formats read in them: whichever the
# suffix says (a JPEG saved as .png is read all the same).
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp", ".bmp"})
_IMAGE_FORMATS = frozenset({"PNG", "JPEG", "MPO", "TIFF", "WEBP", "BMP", "DIB"})
# Below this resolution Japanese characters are too small to read: a page that would have to be
# rendered lower to stay within the pixel limit fails instead.
MIN_DPI = 100
# An image this many times over the pixel limit is refused undecoded (a decompression bomb
# expands a few kilobytes into gigabytes); one less far over is decoded and scaled down.
_BOMB_FACTOR = 4
_MAGIC = ((b"%PDF-", "a PDF document"), (b"PK\x03\x04", "a ZIP archive (an Office file?)"),
          (b"\xd0\xcf\x11\xe0", "an old Office file"), (b"<", "text (HTML or XML?)"))


@dataclass(frozen=True)
class PageImage:
    """One page to read: its number in the document, its pixels (grayscale) and resolution."""

    number: int
    image: Image.Image
    dpi: int

    @cached_property
    def sha256(self) -> str:
        """The page's key in the OCR cache, with the engine and dpi: its pixels' digest."""
        digest = hashlib.sha256(f"{self.image.mode}{self.image.size}".encode())
        digest.update(self.image.tobytes())
        return digest.hexdigest()


def pdf_pages(data: bytes, numbers: list[int], limits: OcrSettings) -> Iterator[PageImage]:
    """Render the PDF pages `numbers` (1-based) at the OCR resolution, lowered for a page whose
    box would exceed the pixel limit; one page in memory at a time."""
    _check_page_count(len(numbers), limits)
    pdf = pdfium.PdfDocument(data)
    try:
        for number in numbers:
            page = pdf[number - 1]
            try:
                width_pt, height_pt = page.get_size()
                dpi = _dpi_within(width_pt / 72, height_pt / 72, number, limits)
                bitmap = page.render(scale=dpi / 72, grayscale=True)
                image = bitmap.to_pil().convert("L")
            finally:
                page.close()
            yield PageImage(number, image, dpi)
    finally:
        pdf.close()


def image_pages(data: bytes, suffix: str, limits: OcrSettings) -> Iterator[PageImage]:
    """The frames of an image file (a TIFF may hold many pages), scaled down to the pixel limit
    where they exceed it."""
    try:
        image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise OcrError(f"image refused undecoded as a possible decompression bomb: {exc}") from exc
    except Exception as exc:  # Pillow reports unreadable files with several types
        raise OcrError(_not_an_image(data, suffix)) from exc
    if image.format not in _IMAGE_FORMATS:
        raise OcrError(f"file is named {suffix} but holds a {image.format} image, which is not "
                       "read (PNG, JPEG, TIFF, WebP and BMP are)")
    frames = getattr(image, "n_frames", 1)
    _check_page_count(frames, limits)
    for number, frame in enumerate(ImageSequence.Iterator(image), start=1):
        yield _fitted(frame, number, _image_dpi(frame), limits)


def _fitted(frame: Image.Image, number: int, dpi: int, limits: OcrSettings) -> PageImage:
    width, height = frame.size
    pixels = width * height
    limit = limits.max_megapixels * 1e6
    where = f"page {number}: " if number > 1 else ""
    if pixels > _BOMB_FACTOR * limit:
        raise OcrError(f"{where}image is {width} × {height} ({pixels / 1e6:,.0f} MP), over "
                       f"{_BOMB_FACTOR} × the {limits.max_megapixels:g} MP limit "
                       "(KB_OCR_MAX_MEGAPIXELS): refused undecoded as a possible "
                       "decompression bomb")
    try:
        page = frame.convert("L")
    except Image.DecompressionBombError as exc:
        raise OcrError(f"{where}image refused as a possible decompression bomb: {exc}") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise OcrError(f"{where}image data is truncated or corrupt: {exc}") from exc
    if pixels > limit:
        scale = math.sqrt(limit / pixels)
        page = page.resize((max(1, int(width * scale)), max(1, int(height * scale))),
                           Image.Resampling.LANCZOS)
        dpi = max(1, int(dpi * scale))
    return PageImage(number, page, dpi)


def _dpi_within(width_in: float, height_in: float, number: int, limits: OcrSettings) -> int:
    """The OCR resolution, lowered so the page stays within the pixel limit; refused when
    that would be too low to read."""
    area = width_in * height_in
    dpi = limits.dpi
    if area * dpi * dpi > limits.max_megapixels * 1e6:
        dpi = int(math.sqrt(limits.max_megapixels * 1e6 / area))
    if dpi < MIN_DPI:
        raise OcrError(
            f"page {number} is {width_in * 25.4:,.0f} × {height_in * 25.4:,.0f} mm: within the "
            f"{limits.max_megapixels:g} MP limit (KB_OCR_MAX_MEGAPIXELS) it could be read at "
            f"only {dpi} dpi, under the {MIN_DPI} dpi Japanese text needs")
    return dpi


def _check_page_count(count: int, limits: OcrSettings) -> None:
    if count > limits.max_pages:
        raise OcrError(f"{count:,} pages to read by OCR, over the limit of {limits.max_pages:,} "
                       "(KB_OCR_MAX_PAGES)")


def _image_dpi(frame: Image.Image) -> int:
    """The resolution the file states (scanners write it), else 200, a common scan's."""
    stated = frame.info.get("dpi")
    try:
        dpi = round(float(stated[0])) if stated else 0
    except (TypeError, ValueError, IndexError):
        dpi = 0
    return dpi if 50 <= dpi <= 1200 else 200


def _not_an_image(data: bytes, suffix: str) -> str:
    if not data:
        return "file is empty"
    for magic, kind in _MAGIC:
        if data.lstrip()[: len(magic)] == magic:
            return f"file is named {suffix} but holds {kind}, not an image"
    return f"not a readable {suffix} image (unknown or corrupt data)"
