"""POST /v1/search latency while scans are read by OCR, beside idle, in one run.

    .venv/bin/python -m kb_eval.scan_set /tmp/scans --samples samples/docs
    .venv/bin/python bench/ocr_load.py --home /tmp/kbdev --scans /tmp/scans/samples \\
        [--pages 12] [--rate 5] [--seconds 15] [--rounds 3]

Runs `kb serve` on the installation at --home (already holding documents; its token is made
for the run and revoked after it) and sends searches for the questions of samples/eval.jsonl
on a fixed schedule, --rate a second (open loop: latency counts from the scheduled send time).
Each round measures a window of --seconds idle, then starts `kb ingest` of a fresh copy of the
scans under --scans (at most --pages pages, the OCR cache emptied first, so every page is read
again) and measures windows of --seconds until the ingest ends; a window counts as "during
OCR" when the engine (a tesseract process, or its line recognizer's) ran through at least 60% of
it (between two runs of the engine, a page is straightened in the ingest's own process). Idle
and busy windows alternate within each round, so the machine's drift hits both. The closing
lines give the medians over the rounds of the idle and during-OCR p50/p95 and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service import Server, _db_url, _kb_command, _prepare_env, open_loop  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
_BUSY_SHARE = 0.6


class EngineWatch:
    """Samples every 0.2 s whether the engine runs (tesseract, or the line recognizer's
    process), for the windows to ask."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            running = any(_engine_runs(p)
                          for p in psutil.process_iter(["name", "cmdline", "status"]))
            self.samples.append((time.perf_counter(), running))
            time.sleep(0.2)

    def share(self, start: float, end: float) -> float:
        inside = [running for at, running in self.samples if start <= at <= end]
        return sum(inside) / len(inside) if inside else 0.0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _engine_runs(process: psutil.Process) -> bool:
    if process.info["name"] == "tesseract":
        return True
    # The line recognizer is kept from page to page (kb_pipeline/ocr/engine.py): it counts
    # while it computes, not while it waits for the next page.
    return (process.info["status"] == psutil.STATUS_RUNNING
            and any("kb_pipeline.ocr.recognizer" in part for part in process.info["cmdline"] or []))


def _percentiles(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    return (statistics.median(ordered),
            ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))])


def _scan_copy(scans: Path, pages: int, into: Path) -> int:
    """Copy whole scans from `scans` until about `pages` pages; return the pages copied."""
    manifest = [json.loads(line) for line in (scans.parent / "manifest.jsonl").open()]
    per_scan: dict[str, int] = {}
    for page in manifest:
        per_scan[page["scan"]] = per_scan.get(page["scan"], 0) + 1
    copied = 0
    for scan, count in sorted(per_scan.items()):
        source = scans.parent / scan
        if copied >= pages or not source.is_relative_to(scans):
            continue
        shutil.copyfile(source, into / source.name)
        copied += count
    return copied


async def _rounds(args: argparse.Namespace, base_url: str, token: str, questions: list[str],
                  env: dict[str, str], url: str, log_dir: Path, watch: EngineWatch
                  ) -> list[tuple[str, float, float]]:
    """Each round's idle window, then windows while a fresh copy of the scans is ingested;
    (idle|ocr, p50, p95) per round."""
    rows: list[tuple[str, float, float]] = []
    async with httpx.AsyncClient(base_url=base_url, timeout=30,
                                 headers={"Authorization": f"Bearer {token}"}) as client:
        await open_loop(client, "/v1/search", questions, args.rate, 3)  # warm-up
        print(f"{'round':>5} {'window':<8} {'engine':>7} {'sent':>5} {'p50 ms':>7} "
              f"{'p95 ms':>7}  load")
        for round_no in range(1, args.rounds + 1):
            idle = await open_loop(client, "/v1/search", questions, args.rate, args.seconds)
            p50, p95 = _percentiles(idle.latencies_ms)
            rows.append(("idle", p50, p95))
            print(f"{round_no:>5} {'idle':<8} {'':>7} {idle.sent:>5} {p50:>7.1f} {p95:>7.1f}  "
                  f"{psutil.getloadavg()[0]:.2f}", flush=True)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DELETE FROM ocr_pages")
            folder = Path(tempfile.mkdtemp(prefix="scans-", dir=log_dir))
            pages = _scan_copy(args.scans, args.pages, folder)
            ingest = subprocess.Popen(
                [*_kb_command(), "ingest", str(folder), "--groups", "all-employees"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            busy: list[float] = []
            while ingest.poll() is None:
                start = time.perf_counter()
                run = await open_loop(client, "/v1/search", questions, args.rate, args.seconds)
                share = watch.share(start, time.perf_counter())
                if share >= _BUSY_SHARE:
                    busy += run.latencies_ms
                p50, p95 = _percentiles(run.latencies_ms)
                print(f"{round_no:>5} {'ingest':<8} {share:>6.0%} {run.sent:>5} {p50:>7.1f} "
                      f"{p95:>7.1f}  {psutil.getloadavg()[0]:.2f}", flush=True)
            print(f"      ({pages} pages ingested, exit {ingest.returncode})")
            if busy:
                rows.append(("ocr", *_percentiles(busy)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--scans", type=Path, required=True,
                        help="a folder of scans made by python -m kb_eval.scan_set")
    parser.add_argument("--pages", type=int, default=12)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    _, env = _prepare_env(home=args.home)
    url = _db_url(env)
    questions = [json.loads(line)["question"]
                 for line in (REPO / "samples" / "eval.jsonl").open() if line.strip()]
    token = subprocess.run([*_kb_command(), "token", "create", "ocr-load-bench", "--groups",
                            "all-employees"], env=env, capture_output=True, text=True,
                           check=True).stdout.strip()
    log_dir = Path(tempfile.mkdtemp(prefix="ocr-load-"))
    server = Server(log_dir, env)
    watch = EngineWatch()
    try:
        server.wait_ready()
        rows = asyncio.run(_rounds(args, server.base_url, token, questions, env, url, log_dir,
                                   watch))
    finally:
        watch.stop()
        server.stop()
        subprocess.run([*_kb_command(), "token", "revoke", "ocr-load-bench"], env=env,
                       capture_output=True)
    for label in ("idle", "ocr"):
        kept = [(p50, p95) for name, p50, p95 in rows if name == label]
        if kept:
            print(f"{label:<5} median over {len(kept)} rounds: "
                  f"p50 {statistics.median(p for p, _ in kept):.1f} ms, "
                  f"p95 {statistics.median(p for _, p in kept):.1f} ms")
    idle95 = [p95 for name, _, p95 in rows if name == "idle"]
    ocr95 = [p95 for name, _, p95 in rows if name == "ocr"]
    if idle95 and ocr95:
        print(f"p95 during OCR / idle: {statistics.median(ocr95) / statistics.median(idle95):.2f}")


if __name__ == "__main__":
    main()
