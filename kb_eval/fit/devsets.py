"""What the fitters share: a development set named on the command line, the installation it is
indexed in, that installation's knowledge base or, for a fitter that tunes what the face keeps
inside, its searcher and a search connection, and the set's folds grouped by document."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psycopg

from kb_core.database import connect
from kb_core.migrations import prepare_database
from kb_core.settings import Settings
from kb_search.rerankers import make_reranker
from kb_search.search import Searcher, configure_search_session
from kb_search.synonyms import Synonyms

__all__ = ["FOLDS", "Figures", "fitter_parser", "folds_by_document", "installation",
           "keep_every_set", "parse_set", "searching", "set_name"]

FOLDS = 5


def fitter_parser(name: str, doc: str, written: Path) -> argparse.ArgumentParser:
    """The arguments every fitter takes: its sets, and --write to commit `written`; `doc` is
    the fitter's docstring, whose first paragraph describes it."""
    parser = argparse.ArgumentParser(prog=f"python -m kb_eval.fit {name}",
                                     description=doc.split("\n\n")[0])
    parser.add_argument("--set", action="append", required=True, metavar="EVAL=HOME:GROUPS",
                        help="a question set, the KB_HOME that indexes it, its default groups")
    parser.add_argument("--write", action="store_true", help=f"write {written.name}")
    parser.add_argument("--accept-loss", action="store_true",
                        help="write even where a set's figure falls below its figure before "
                             "the fit (say why in the commit)")
    return parser


# A set's figures (higher is better), each with the most it may fall by: one question's worth.
Figures = Mapping[str, tuple[float, float]]


def keep_every_set(before: Mapping[str, Figures], after: Mapping[str, Figures],
                   args: argparse.Namespace) -> None:
    """Prints every set's figures before and after a fit, in sample, and each figure that fell
    by more than one question; when the fit is to be written (`args.write`), raises SystemExit
    naming them instead (a fit must not buy one set's gain with another's loss), unless
    `args.accept_loss`."""
    print("every set before and after the fit (in sample):")
    losses = []
    for name, figures in after.items():
        cells = []
        for figure, (value, question) in figures.items():
            old = before.get(name, {}).get(figure)
            cells.append(f"{figure} {'-' if old is None else f'{old[0]:.4f}'} -> {value:.4f}")
            if old is not None and value < old[0] - question - 1e-12:
                losses.append(f"{name}: {figure} {old[0]:.4f} -> {value:.4f}")
        print(f"  {name}: " + ", ".join(cells))
    for loss in losses:
        print(f"  fell: {loss}")
    if losses and args.write and not args.accept_loss:
        raise SystemExit("the fit lowers a development set's figure by more than one question, "
                         "so nothing is written (--accept-loss writes it anyway): "
                         + "; ".join(losses))


def parse_set(spec: str) -> tuple[Path, Path, list[str]]:
    """EVAL=HOME:GROUPS as (question file, KB_HOME, default groups)."""
    path, _, rest = spec.partition("=")
    home, _, groups = rest.partition(":")
    return Path(path), Path(home), [g for g in groups.split(",") if g]


def set_name(path: Path) -> str:
    """A set's name in the figures: its folder and file (both sets' files are eval.jsonl)."""
    return f"{path.parent.name}/{path.name}"


def installation(home: Path) -> Settings:
    """The configuration of the installation at `home`, whatever the environment says."""
    return Settings.from_env({"KB_HOME": str(home)})


@contextmanager
def searching(settings: Settings) -> Iterator[tuple[Searcher, psycopg.Connection]]:
    """The engine's searcher, built as `open_knowledge_base` builds it, and a search connection
    to the database of `settings`, following its index's model: for the fitters that need the
    plan, the vector or the legs of a search (fusion) or the passages as the answerer is given
    them (sentences), which the face keeps inside."""
    settings = prepare_database(settings)
    searcher = Searcher(settings.embedder, Synonyms(settings.synonyms),
                        make_reranker(settings.reranker))
    with connect(settings.database_url, autocommit=True) as conn:
        configure_search_session(conn)
        searcher.follow(conn)
        yield searcher, conn


def folds_by_document(documents: list[str | None]) -> np.ndarray:
    """A fold per question: by document (sorted, dealt round-robin), the rest round-robin."""
    order = {d: i % FOLDS for i, d in enumerate(sorted({d for d in documents if d}))}
    loose = iter(range(len(documents)))
    return np.array([order[d] if d else next(loose) % FOLDS for d in documents])
