"""OpenAI chat completions through the openai SDK; OPENAI_BASE_URL is honoured by the SDK."""

from __future__ import annotations

from collections.abc import Iterator

import openai

from kb_search.answerers.chat import (
    MAX_ANSWER_TOKENS,
    ChatAnswerer,
    MalformedReplyError,
)
from kb_search.answerers.contract import AnswererConfigError

__all__ = ["OpenAIAnswerer"]


class OpenAIAnswerer(ChatAnswerer):
    """Answers with an OpenAI chat model; one SDK client kept for its connections."""

    def __init__(self, api_key: str, model: str, timeout: float) -> None:
        if not api_key:
            raise AnswererConfigError("KB_LLM=openai needs OPENAI_API_KEY")
        self.model = model
        self.name = f"openai/{model}"
        # One retry, as for Claude: worth it for a blip, not while a person waits much longer.
        self._client = openai.OpenAI(api_key=api_key, timeout=timeout, max_retries=1)

    def _messages(self, system: str, user: str) -> list[dict]:
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _complete(self, system: str, user: str) -> str:
        # No temperature: reasoning models reject it, and the prompt already pins the format.
        reply = self._client.chat.completions.create(
            model=self.model,
            messages=self._messages(system, user),
            max_completion_tokens=MAX_ANSWER_TOKENS,
        )
        # The SDK does not validate a reply's shape; one without choices is not an answer.
        choices = getattr(reply, "choices", None)
        if not choices:
            raise MalformedReplyError("the reply is not a chat completion")
        return choices[0].message.content or ""

    def _stream(self, system: str, user: str) -> Iterator[str]:
        chunks = self._client.chat.completions.create(
            model=self.model,
            messages=self._messages(system, user),
            max_completion_tokens=MAX_ANSWER_TOKENS,
            stream=True,
        )
        with chunks:
            for chunk in chunks:
                if chunk.choices and chunk.choices[0].delta.content:
                    yield chunk.choices[0].delta.content
