"""OpenAI chat completions through the openai SDK; OPENAI_BASE_URL is honoured by the SDK."""

from __future__ import annotations

from collections.abc import Iterator

from kb_core.chat_clients import OpenAIChat, chat_messages
from kb_search.answerers.chat_answerer import MAX_ANSWER_TOKENS, ChatAnswerer

__all__ = ["OpenAIAnswerer"]


class OpenAIAnswerer(ChatAnswerer):
    """Answers with an OpenAI chat model; one SDK client kept for its connections."""

    def __init__(self, chat: OpenAIChat) -> None:
        self._chat = chat
        self.model = chat.model
        self.name = chat.name

    def _complete(self, system: str, user: str) -> str:
        return self._chat.complete(system, user, MAX_ANSWER_TOKENS)

    def _stream(self, system: str, user: str) -> Iterator[str]:
        chunks = self._chat.client.chat.completions.create(
            model=self.model,
            messages=chat_messages(system, user),
            max_completion_tokens=MAX_ANSWER_TOKENS,
            stream=True,
        )
        with chunks:
            for chunk in chunks:
                if chunk.choices and chunk.choices[0].delta.content:
                    yield chunk.choices[0].delta.content
