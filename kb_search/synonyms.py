"""The company's synonym and abbreviation dictionary: a plain file, reloaded when it changes."""

from __future__ import annotations

import threading
from pathlib import Path

from kb_core.keywords import normalize

__all__ = ["Synonyms"]


class Synonyms:
    """Groups of equivalent terms from a file such as `有給 = 年休 = 年次有給休暇`.

    The file is read again whenever its modification time changes, so editing it takes effect
    on the next question without a restart.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._groups: list[list[str]] = []
        self._lock = threading.Lock()

    def _current(self) -> list[list[str]]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return []
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if stamp != self._stamp:
                self._groups = _parse(self.path.read_text(encoding="utf-8"))
                self._stamp = stamp
            return self._groups

    def expansions(self, normalized_question: str) -> list[str]:
        """Forms equivalent to those the question contains, that it does not contain itself."""
        found: list[str] = []
        for group in self._current():
            if any(form in normalized_question for form in group):
                found.extend(f for f in group if f not in normalized_question and f not in found)
        return found


def _parse(text: str) -> list[list[str]]:
    groups = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        forms = [normalize(f.strip()) for f in line.split("=") if f.strip()]
        if len(forms) > 1:
            groups.append(forms)
    return groups
