"""The answerer of every chat model (Claude, OpenAI, Ollama): prompt, empty-reply checks and the
finished Answer, over the model's client (kb_core/chat_clients.py, which the reranker and the
pipeline's entity extractor share). With no passages there is nothing to ground an answer in,
so no model is called. An empty reply is an error (a malformed response), which the fallback
turns into the extractive answer, rather than an answer that says nothing.

Given tools (the tables of the passages' documents), the model may call them for a few rounds
before it replies; its reply then arrives whole, also when streamed: the rounds cannot be
shown as text, and the reply is short.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from kb_core.chat_clients import ChatModel, MalformedReplyError, converse
from kb_search.answerers.answer import (
    NOT_FOUND,
    Answer,
    Exchange,
    Passage,
    Tools,
    answer_from_text,
)
from kb_search.answerers.prompt import SYSTEM_PROMPT, TOOLS_PROMPT, build_user_message

__all__ = [
    "MAX_ANSWER_TOKENS",
    "ChatAnswerer",
    "EmptyReplyError",
    "MalformedReplyError",
]

MAX_ANSWER_TOKENS = 800  # a short cited answer; the cap guards against rambling
# A table question needs one call, a comparison of two computations two or three; more rounds
# are a model that does not settle, and the fallback answers instead.
MAX_TOOL_ROUNDS = 4


class EmptyReplyError(MalformedReplyError):
    """The model's reply held no text."""


class ChatAnswerer:
    """An answerer backed by a chat model; its client kept for its connections."""

    calls_tools = True

    def __init__(self, chat: ChatModel) -> None:
        self._chat = chat
        self.name = chat.name

    def answer(self, question: str, passages: list[Passage], tools: Tools | None = None,
               earlier: Sequence[Exchange] = ()) -> Answer:
        if not passages:
            return self.finish(NOT_FOUND)
        if tools is None:
            text = self.complete(SYSTEM_PROMPT,
                                 build_user_message(question, passages, earlier=earlier))
        else:
            text = converse(self._chat, TOOLS_PROMPT,
                            build_user_message(question, passages, tools.described(), earlier),
                            tools.definitions, tools.call, MAX_ANSWER_TOKENS, MAX_TOOL_ROUNDS)
        if not text.strip():
            raise EmptyReplyError(f"{self.name} replied with no text")
        return self.finish(text)

    def stream(self, question: str, passages: list[Passage], tools: Tools | None = None,
               earlier: Sequence[Exchange] = ()) -> Iterator[str]:
        if not passages:
            yield NOT_FOUND
            return
        if tools is not None:
            yield self.answer(question, passages, tools, earlier).text
            return
        produced = False
        for delta in self._chat.stream(SYSTEM_PROMPT,
                                       build_user_message(question, passages, earlier=earlier),
                                       MAX_ANSWER_TOKENS):
            if delta:
                produced = produced or bool(delta.strip())
                yield delta
        if not produced:
            raise EmptyReplyError(f"{self.name} streamed no text")

    def finish(self, text: str) -> Answer:
        return answer_from_text(text, self.name)

    def complete(self, system: str, user: str) -> str:
        """The model's whole reply to one system prompt and user message."""
        return self._chat.complete(system, user, MAX_ANSWER_TOKENS)
