"""Access groups of a file, from `_access.toml` files in its folder and the folders above it.

    groups = ["hr", "managers"]        # this folder and its subfolders
    [files]
    "給与規程.md" = ["hr"]             # one file of this folder, overriding `groups`

The nearest folder with an access file decides; a file that no access file covers gets no
groups (visible to nobody) unless `kb ingest --groups` gave it fallback groups.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ACCESS_FILE", "AccessError", "DocumentAccess", "resolve_access"]

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


def _read(access_file: Path) -> dict:
    try:
        with access_file.open("rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AccessError(f"{access_file}: {exc}") from exc


def resolve_access(
    file: Path, root: Path, fallback_groups: tuple[str, ...] | None = None
) -> DocumentAccess:
    """The groups that may see `file`, looking for access files from its folder up to `root`."""
    folder = file.parent
    while True:
        access_file = folder / ACCESS_FILE
        if access_file.is_file():
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
