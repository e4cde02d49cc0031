"""Claude through the anthropic SDK (Messages API); ANTHROPIC_BASE_URL is honoured by the SDK."""

from __future__ import annotations

from collections.abc import Iterator

from kb_core.chat_clients import AnthropicChat
from kb_search.answerers.chat_answerer import MAX_ANSWER_TOKENS, ChatAnswerer

__all__ = ["ClaudeAnswerer"]


class ClaudeAnswerer(ChatAnswerer):
    """Answers with a Claude model; one SDK client kept for its connections."""

    def __init__(self, chat: AnthropicChat) -> None:
        self._chat = chat
        self.model = chat.model
        self.name = chat.name

    def _complete(self, system: str, user: str) -> str:
        return self._chat.complete(system, user, MAX_ANSWER_TOKENS)

    def _stream(self, system: str, user: str) -> Iterator[str]:
        request = self._chat.request(system, user, MAX_ANSWER_TOKENS)
        with self._chat.client.messages.stream(**request) as stream:
            yield from stream.text_stream
