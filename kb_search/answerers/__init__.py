"""Answerers: turn the passages a search found into a short cited answer, or say nothing was found.

`make_answerer(settings)` (KB_LLM) builds one: extractive (the default, offline), claude, openai or
ollama, its chat client made by `kb_core.chat_clients.make_chat` (a provider's SDK is imported
only when its client is made), and an unknown name or a missing API key fails loudly at
construction. The service calls `answer_with_fallback` or `stream_with_fallback`, so an LLM
that fails or times out costs the extractive answer, labelled as a fallback, never the answer;
then `verify` checks what the answer cites and quotes.
"""

from __future__ import annotations

from kb_core.chat_clients import make_chat
from kb_core.settings import AnswererSettings, ProviderSettings
from kb_search.answerers.answer import (
    NOT_FOUND,
    Answer,
    Answerer,
    AnswererConfigError,
    Passage,
    UnknownAnswererError,
    citations,
)
from kb_search.answerers.chat_answerer import ChatAnswerer
from kb_search.answerers.extractive import ExtractiveAnswerer
from kb_search.answerers.fallback import (
    StreamedAnswer,
    answer_with_fallback,
    stream_with_fallback,
)
from kb_search.answerers.verification import verify

__all__ = [
    "NOT_FOUND",
    "Answer",
    "Answerer",
    "AnswererConfigError",
    "Passage",
    "StreamedAnswer",
    "UnknownAnswererError",
    "answer_with_fallback",
    "citations",
    "make_answerer",
    "stream_with_fallback",
    "verify",
]


def make_answerer(settings: AnswererSettings) -> Answerer:
    """The answerer `settings` name (KB_LLM): extractive (also when empty), claude, openai,
    ollama."""
    name = settings.llm
    choice = name.strip().lower() or "extractive"
    if choice == "extractive":
        return ExtractiveAnswerer()
    if choice not in ProviderSettings.CHAT:
        raise UnknownAnswererError(
            f"unknown answerer {name!r} (KB_LLM): expected extractive, claude, openai or ollama")
    # One retry: a transient 5xx or dropped connection is worth one more try, no more, while a
    # person waits for the answer.
    return ChatAnswerer(make_chat(settings.providers, choice, settings.timeout_s, max_retries=1,
                                  chosen_by=f"KB_LLM={choice}"))
