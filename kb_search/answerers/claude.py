"""Claude through the anthropic SDK (Messages API); ANTHROPIC_BASE_URL is honoured by the SDK."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic

from kb_search.answerers.chat import (
    MAX_ANSWER_TOKENS,
    ChatAnswerer,
    MalformedReplyError,
)
from kb_search.answerers.contract import AnswererConfigError

__all__ = ["ClaudeAnswerer"]


class ClaudeAnswerer(ChatAnswerer):
    """Answers with a Claude model; one SDK client kept for its connections."""

    def __init__(self, api_key: str, model: str, timeout: float) -> None:
        if not api_key:
            raise AnswererConfigError("KB_LLM=claude needs ANTHROPIC_API_KEY")
        self.model = model
        self.name = f"claude/{model}"
        # One retry: a transient 5xx or dropped connection is worth one more try, no more,
        # while a person waits for the answer.
        self._client = anthropic.Anthropic(api_key=api_key, timeout=timeout, max_retries=1)

    def _request(self, system: str, user: str) -> dict:
        return {
            "model": self.model,
            "max_tokens": MAX_ANSWER_TOKENS,
            "system": system,
            "messages": [{"role": "user", "content": user}],
        }

    def _complete(self, system: str, user: str) -> str:
        reply = self._client.messages.create(**self._request(system, user))
        # The SDK does not validate a reply's shape; one without content is not an answer.
        blocks = getattr(reply, "content", None)
        if not isinstance(blocks, list):
            raise MalformedReplyError("the reply is not a Messages API message")
        return "".join(b.text for b in blocks if getattr(b, "type", None) == "text")

    def _stream(self, system: str, user: str) -> Iterator[str]:
        with self._client.messages.stream(**self._request(system, user)) as stream:
            yield from stream.text_stream
