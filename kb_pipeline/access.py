"""Access groups of a file, from `_access.toml` files in its folder and the folders above it.

    groups = ["hr", "managers"]        # this folder and its subfolders
    [files]
    "給与規程.md" = ["hr"]             # one file of this folder, overriding `groups`

The nearest folder with an access file decides; a file that no access file covers gets no
groups (visible to nobody) unless `kb ingest --groups` gave it fallback groups; the indexed
documents so left are listed by `documents_without_rule`.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

import psycopg

from kb_core.queries import query

__all__ = ["ACCESS_FILE", "AccessError", "DocumentAccess", "documents_without_rule",
           "resolve_access"]

ACCESS_FILE = "_access.toml"


class AccessError(ValueError):
    """An access file that cannot be read; the message names the file and the problem."""


@dataclass(frozen=True)
class DocumentAccess:
    groups: tuple[str, ...]
    rule: str | None  # the access file (or "kb ingest --groups") that decided; None: no rule


def _groups(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(g, str) and g.strip() for g in value):
        raise AccessError(f"{where}: groups must be a list of non-empty strings")
    return tuple(sorted({g.strip() for g in value}))


def _check_inside(path: Path, inside: Path, what: str) -> None:
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # missing, or a symlink loop (RuntimeError on 3.11)
        raise AccessError(f"{path}: {what} cannot be resolved ({exc})") from exc
    if inside not in target.parents:
        raise AccessError(f"{path}: {what} is a symlink leading outside the watched folder; "
                          "not read")


def _read(access_file: Path) -> dict:
    try:
        with access_file.open("rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AccessError(f"{access_file}: {exc}") from exc


def resolve_access(
    file: Path, root: Path, fallback_groups: tuple[str, ...] | None = None
) -> DocumentAccess:
    """The groups that may see `file`, looking for access files from its folder up to `root`.

    Raises AccessError for a file that resolves outside `root` (a file swapped for a symlink
    after the folder was scanned), so nothing outside a watched folder is ever staged.
    """
    inside = root.resolve()
    _check_inside(file, inside, "file")
    folder = file.parent
    while True:
        access_file = folder / ACCESS_FILE
        # lexists, not is_file: an access file that is a broken symlink or a directory must
        # fail, not count as absent, or its documents would silently inherit a wider rule.
        if os.path.lexists(access_file):
            _check_inside(access_file, inside, "access file")
            rules = _read(access_file)
            per_file = rules.get("files", {})
            if file.parent == folder and file.name in per_file:
                where = f"{access_file} [files] {file.name!r}"
                return DocumentAccess(_groups(per_file[file.name], where), str(access_file))
            if "groups" in rules:
                return DocumentAccess(_groups(rules["groups"], str(access_file)), str(access_file))
        if folder == root or folder.parent == folder or root not in folder.parents:
            break
        folder = folder.parent
    if fallback_groups:
        return DocumentAccess(tuple(sorted(set(fallback_groups))), "kb ingest --groups")
    return DocumentAccess((), None)


def documents_without_rule(conn: psycopg.Connection) -> list[str]:
    """The paths of the indexed documents no access rule covers, sorted: visible to nobody."""
    return [row[0] for row in conn.execute(query("documents_without_access_rule"))]
