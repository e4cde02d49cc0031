"""Named SQL queries from sql/queries/*.sql, loaded once.

A file holds several queries, each introduced by a line `-- name: <query_name>`; parameters are
`%(name)s` placeholders, never string formatting.
"""

from __future__ import annotations

import functools
import re

from kb_core.settings import REPO_ROOT

__all__ = ["query"]

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@functools.cache
def _load() -> dict[str, str]:
    queries: dict[str, str] = {}
    for path in sorted((REPO_ROOT / "sql" / "queries").glob("*.sql")):
        parts = _NAME.split(path.read_text(encoding="utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise ValueError(f"query {name!r} defined twice ({path.name})")
            queries[name] = body.strip()
    return queries


def query(name: str) -> str:
    """The SQL text of the named query."""
    try:
        return _load()[name]
    except KeyError:
        raise KeyError(f"no SQL query named {name!r} in sql/queries/") from None
