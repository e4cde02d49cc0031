"""A local model through Ollama's HTTP API (POST {OLLAMA_HOST}/api/chat), over httpx.

Streaming replies are newline-delimited JSON objects, each with message.content, the last with
"done": true. A stream that ends without it was cut off, and that is an error, not an answer.
No retries: Ollama runs next to the service, and a failure there is not a network blip.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx

from kb_search.answerers.chat import MAX_ANSWER_TOKENS, ChatAnswerer

__all__ = ["OllamaAnswerer", "OllamaError"]


class OllamaError(RuntimeError):
    """Ollama reported an error or sent a reply we cannot read."""


class OllamaAnswerer(ChatAnswerer):
    """Answers with a model served by Ollama; one HTTP client kept for its connections."""

    def __init__(self, host: str, model: str, timeout: float) -> None:
        # OLLAMA_HOST is often written without a scheme (127.0.0.1:11434), as Ollama allows.
        base_url = host if "://" in host else f"http://{host}"
        self.model = model
        self.name = f"ollama/{model}"
        self._client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)

    def _request(self, system: str, user: str, stream: bool) -> dict:
        return {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "stream": stream,
            "options": {"temperature": 0, "num_predict": MAX_ANSWER_TOKENS},
        }

    def _complete(self, system: str, user: str) -> str:
        response = self._client.post("/api/chat", json=self._request(system, user, False))
        response.raise_for_status()
        return _content(response.json())

    def _stream(self, system: str, user: str) -> Iterator[str]:
        request = self._request(system, user, True)
        with self._client.stream("POST", "/api/chat", json=request) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.strip():
                    continue
                part = json.loads(line)
                done = isinstance(part, dict) and part.get("done") is True
                text = _content(part, required=not done)  # the final object may carry none
                if text:
                    yield text
                if done:
                    return
        raise OllamaError("Ollama's stream ended before its final done message")


def _content(reply: object, required: bool = True) -> str:
    """The message text of one /api/chat reply object; raises on an error or a foreign shape."""
    if isinstance(reply, dict) and "error" in reply:
        raise OllamaError(f"Ollama reported an error: {str(reply['error'])[:200]}")
    message = reply.get("message") if isinstance(reply, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        if not required:
            return ""
        raise OllamaError(f"not an Ollama chat reply: {str(reply)[:200]!r}")
    return content
