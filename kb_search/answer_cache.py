"""Answers kept by question, groups and answerer, valid while the index is unchanged: any
change of the index (documents, their groups, a publication, learned facts) bumps its version
and so retires every answer given before it."""

from __future__ import annotations

import threading
from collections import OrderedDict

from kb_core.keywords import normalize
from kb_search.grounded_answers import AskResult

__all__ = ["AnswerCache"]


class AnswerCache:
    """Answers by (question as searched, question answered, groups, answerer, mode), valid
    while the index version is unchanged."""

    def __init__(self, size: int = 1000) -> None:
        self.size = size
        self._entries: OrderedDict[tuple, tuple[int, AskResult]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(question: str, groups: tuple[str, ...], answerer: str, mode: str,
            answered_for: str | None = None) -> tuple:
        """The key of the answer to `question` as searched, written for `answered_for` when
        that is narrower (a follow-up's focus, kb_search/follow_ups.py)."""
        answered = normalize(answered_for or question).strip()
        return (normalize(question).strip(), answered, tuple(sorted(set(groups))), answerer,
                mode)

    def get(self, key: tuple, version: int) -> AskResult | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != version:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: tuple, version: int, result: AskResult) -> None:
        with self._lock:
            self._entries[key] = (version, result)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
