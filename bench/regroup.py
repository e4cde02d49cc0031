"""Re-permissioning: the seconds to change the groups of N documents of a kept bench/search.py
index, one transaction each as the folder sensor writes them (kb_pipeline/catalogue.py), and to
change them back.

    .venv/bin/python bench/search.py --sizes 100000 --home /tmp/kbs   # build the index, once
    .venv/bin/python bench/regroup.py --home /tmp/kbs --documents 1000

The synthetic documents taken are the first N by id; each gains the group `bench-regrouped`
(so its passages move to another set of groups and their keyword statistics with them), then
loses it again. Prints the seconds of each way, per document and per passage.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from search import _installation  # bench/ is the script's directory


def _regroup(conn, documents: list[tuple[str, list[str], str | None]]) -> float:  # noqa: ANN001
    from kb_core.queries import query

    started = time.perf_counter()
    for uri, groups, rule in documents:
        with conn.transaction():
            conn.execute(query("lock_keyword_stats"))
            conn.execute(query("regroup_document"), {"uri": uri, "groups": groups, "rule": rule})
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True,
                        help="a KB_HOME that bench/search.py --home built and kept")
    parser.add_argument("--documents", type=int, default=1000)
    args = parser.parse_args()
    _, env, _ = _installation(args.home)

    from kb_core.database import connect
    from kb_core.database_server import database_url, stop_embedded
    from kb_core.settings import Settings

    settings = Settings.from_env(env)
    try:
        with connect(database_url(settings), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT d.source_uri, d.allowed_groups, d.access_rule, "
                "(SELECT count(*) FROM chunks c WHERE c.document_id = d.id) "
                "FROM documents d WHERE d.path LIKE 'bench/%%' ORDER BY d.id LIMIT %s",
                (args.documents,)).fetchall()
            passages = sum(r[3] for r in rows)
            there = _regroup(conn, [(u, [*g, "bench-regrouped"], r) for u, g, r, _ in rows])
            back = _regroup(conn, [(u, g, r) for u, g, r, _ in rows])
        for name, seconds in (("regrouped", there), ("back", back)):
            print(f"{name}: {len(rows)} documents ({passages} passages) in {seconds:.1f} s, "
                  f"{1000 * seconds / len(rows):.1f} ms per document, "
                  f"{1000 * seconds / passages:.2f} ms per passage", flush=True)
    finally:
        stop_embedded(settings)


if __name__ == "__main__":
    sys.exit(main())
