"""`kb backup` and `kb restore` timed on an installation, and the backup's size.

    .venv/bin/python bench/backup.py --home /tmp/kbdev [--repeat 3]
    .venv/bin/python bench/ingest.py --docs 10000 --rebuild --first-build --repeat 1 \\
        --home /tmp/rb/h10k && .venv/bin/python bench/backup.py --home /tmp/rb/h10k

Each round backs the installation of --home up to a new file (its server running, as under
`kb up`), restores that file into a new KB_HOME and removes both; the medians are printed with
what the installation holds (the backup's manifest) and the size of its database on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KB = str(Path(sys.executable).parent / "kb")


def _kb(home: Path, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "DAGSTER_"))}
    env["KB_HOME"] = str(home)
    done = subprocess.run([KB, *args, "--json"], env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"kb {' '.join(args)} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="the installation to back up")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    _kb(args.home, "db", "start")
    backups, restores, sizes = [], [], []
    manifest: dict = {}
    # Short paths: the restored server's socket lives in its KB_HOME.
    with tempfile.TemporaryDirectory(prefix="kbbk-", dir="/tmp") as tmp:
        for round_ in range(args.repeat):
            path, home = Path(tmp) / f"{round_}.kbbackup", Path(tmp) / f"h{round_}"
            start = time.perf_counter()
            summary = _kb(args.home, "backup", str(path))
            backups.append(time.perf_counter() - start)
            manifest, size = summary["manifest"], summary["bytes"]
            sizes.append(size)
            start = time.perf_counter()
            _kb(home, "restore", str(path))
            restores.append(time.perf_counter() - start)
            print(f"round {round_ + 1}: backup {backups[-1]:.1f} s, {size / 2**20:.1f} MB; "
                  f"restore {restores[-1]:.1f} s", file=sys.stderr, flush=True)
            path.unlink()
            shutil.rmtree(home)
    counts = manifest["counts"]
    print(f"installation: {counts['documents']} documents, {counts['chunks']} chunks, "
          f"{counts['query_log']} questions; database on disk "
          f"{_disk(args.home / 'pgdata') / 2**20:.0f} MB")
    print(f"backup:  median {statistics.median(backups):.1f} s of {args.repeat}, "
          f"{statistics.median(sizes) / 2**20:.1f} MB "
          f"(kb {manifest['databases']['kb']['bytes'] / 2**20:.1f} MB, dagster "
          f"{manifest['databases']['dagster']['bytes'] / 2**20:.1f} MB)")
    print(f"restore: median {statistics.median(restores):.1f} s of {args.repeat} "
          f"(load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
