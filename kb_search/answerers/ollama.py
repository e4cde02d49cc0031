"""A local model through Ollama's HTTP API (POST {OLLAMA_HOST}/api/chat), over httpx.

Streaming replies are newline-delimited JSON objects, each with message.content, the last with
"done": true. A stream that ends without it was cut off, and that is an error, not an answer.
No retries: Ollama runs next to the service, and a failure there is not a network blip.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from kb_core.chat_clients import OllamaChat, OllamaError, ollama_reply_text
from kb_search.answerers.chat_answerer import MAX_ANSWER_TOKENS, ChatAnswerer

__all__ = ["OllamaAnswerer", "OllamaError"]


class OllamaAnswerer(ChatAnswerer):
    """Answers with a model served by Ollama; one HTTP client kept for its connections."""

    def __init__(self, chat: OllamaChat) -> None:
        self._chat = chat
        self.model = chat.model
        self.name = chat.name

    def _complete(self, system: str, user: str) -> str:
        return self._chat.complete(system, user, MAX_ANSWER_TOKENS)

    def _stream(self, system: str, user: str) -> Iterator[str]:
        request = self._chat.request(system, user, MAX_ANSWER_TOKENS, True)
        with self._chat.client.stream("POST", "/api/chat", json=request) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.strip():
                    continue
                part = json.loads(line)
                done = isinstance(part, dict) and part.get("done") is True
                # The final object may carry no text.
                text = ollama_reply_text(part, required=not done)
                if text:
                    yield text
                if done:
                    return
        raise OllamaError("Ollama's stream ended before its final done message")
