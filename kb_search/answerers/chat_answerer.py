"""The part every chat-model answerer shares: prompt, empty-reply checks and the finished Answer.

A provider supplies `_complete(system, user) -> text` and `_stream(system, user) -> deltas`
(its client from kb_core/chat_clients.py, which the pipeline's entity extractor shares).
With no passages there is nothing to ground an answer in, so no model is called.
An empty reply is an error (a malformed response), which the fallback turns into the extractive
answer, rather than an answer that says nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

from kb_core.chat_clients import MalformedReplyError
from kb_search.answerers.answer import (
    NOT_FOUND,
    Answer,
    Passage,
    answer_from_text,
)
from kb_search.answerers.prompt import SYSTEM_PROMPT, build_user_message

__all__ = [
    "MAX_ANSWER_TOKENS",
    "ChatAnswerer",
    "EmptyReplyError",
    "MalformedReplyError",
]

MAX_ANSWER_TOKENS = 800  # a short cited answer; the cap guards against rambling


class EmptyReplyError(MalformedReplyError):
    """The model's reply held no text."""


class ChatAnswerer:
    """An answerer backed by a chat model; subclasses say how to call it."""

    name: str

    def answer(self, question: str, passages: list[Passage]) -> Answer:
        if not passages:
            return self.finish(NOT_FOUND)
        text = self.complete(SYSTEM_PROMPT, build_user_message(question, passages))
        if not text.strip():
            raise EmptyReplyError(f"{self.name} replied with no text")
        return self.finish(text)

    def stream(self, question: str, passages: list[Passage]) -> Iterator[str]:
        if not passages:
            yield NOT_FOUND
            return
        produced = False
        for delta in self._stream(SYSTEM_PROMPT, build_user_message(question, passages)):
            if delta:
                produced = produced or bool(delta.strip())
                yield delta
        if not produced:
            raise EmptyReplyError(f"{self.name} streamed no text")

    def finish(self, text: str) -> Answer:
        return answer_from_text(text, self.name)

    def complete(self, system: str, user: str) -> str:
        """The model's whole reply to one system prompt and user message."""
        return self._complete(system, user)

    def _complete(self, system: str, user: str) -> str:
        raise NotImplementedError

    def _stream(self, system: str, user: str) -> Iterator[str]:
        raise NotImplementedError
