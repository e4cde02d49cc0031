"""What the fit scripts share: a development set named on the command line, the installation
it is indexed in, searched as the product searches, and its folds grouped by document."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psycopg

from kb_core.database import connect
from kb_core.migrations import prepare_database
from kb_core.settings import Settings
from kb_search.engine import build_searcher
from kb_search.search import Searcher, configure_search_session

FOLDS = 5


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", action="append", required=True, metavar="EVAL=HOME:GROUPS",
                        help="a question set, the KB_HOME that indexes it, its default groups")


def parse_set(spec: str) -> tuple[Path, Path, list[str]]:
    """EVAL=HOME:GROUPS as (question file, KB_HOME, default groups)."""
    path, _, rest = spec.partition("=")
    home, _, groups = rest.partition(":")
    return Path(path), Path(home), [g for g in groups.split(",") if g]


def set_name(path: Path) -> str:
    """A set's name in the figures: its folder and file (both sets' files are eval.jsonl)."""
    return f"{path.parent.name}/{path.name}"


@contextmanager
def searching(home: Path) -> Iterator[tuple[Searcher, psycopg.Connection]]:
    """The engine and a search connection on the installation at `home`, following its model."""
    settings = prepare_database(Settings.from_env({"KB_HOME": str(home)}))
    searcher = build_searcher(settings)
    with connect(settings.database_url, autocommit=True) as conn:
        configure_search_session(conn)
        searcher.follow(conn)
        yield searcher, conn


def folds_by_document(documents: list[str | None]) -> np.ndarray:
    """A fold per question: by document (sorted, dealt round-robin), the rest round-robin."""
    order = {d: i % FOLDS for i, d in enumerate(sorted({d for d in documents if d}))}
    loose = iter(range(len(documents)))
    return np.array([order[d] if d else next(loose) % FOLDS for d in documents])
