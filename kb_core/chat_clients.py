"""One-shot chat completions from Claude, OpenAI or Ollama: a system prompt and a user message
in, the model's whole reply out; or, with tools, a conversation in which the model calls them
until it replies (`converse`). `make_chat` builds every chat client the product uses, from the
one configuration of the providers (kb_core.settings.ProviderSettings): the answerers
(kb_search/answerers), the LLM reranker (kb_search/rerankers/llm.py) and the pipeline's entity
extractor (kb_pipeline/graph_llm.py), so a provider's client, its key, its base-URL variable
(ANTHROPIC_BASE_URL, OPENAI_BASE_URL, OLLAMA_HOST), its streaming and its reply checks are
written once. A client is kept for its connections.

The SDKs report a malformed reply no better than a missing one; each `complete` raises
MalformedReplyError (or OllamaError) for a reply not shaped like its API's.

A tool is called the way each API says: Claude's `tool_use` blocks answered by `tool_result`
blocks, OpenAI's and Ollama's `tool_calls` answered by messages of role `tool`. The loop is
written once (`converse`); each client says how a turn is asked and how results are returned.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

import httpx

from kb_core.settings import ProviderSettings

__all__ = [
    "AnthropicChat",
    "ChatConfigError",
    "ChatModel",
    "MalformedReplyError",
    "OllamaChat",
    "OllamaError",
    "OpenAIChat",
    "Tool",
    "ToolCall",
    "ToolRoundsError",
    "chat_messages",
    "converse",
    "make_chat",
    "ollama_reply_text",
]


def chat_messages(system: str, user: str) -> list[dict]:
    """A system prompt and a user message as OpenAI's and Ollama's chat APIs both take them."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class ChatConfigError(ValueError):
    """A chat provider named where it cannot be used: unknown, or without its API key."""


class MalformedReplyError(ValueError):
    """The provider's reply is not shaped like one of its answers."""


class OllamaError(RuntimeError):
    """Ollama reported an error or sent a reply we cannot read."""


class ToolRoundsError(RuntimeError):
    """The model went on calling tools past the rounds it was allowed."""


class Tool(NamedTuple):
    """A function the model may call: its name, what it does, its arguments as JSON Schema."""

    name: str
    description: str
    parameters: dict


class ToolCall(NamedTuple):
    """A call the model made: its id (Ollama gives none), the tool, its arguments; None where
    the model wrote arguments that are not a JSON object."""

    id: str
    name: str
    arguments: dict | None


class ChatModel(Protocol):
    name: str  # provider/model, as logs, caches and answers name it

    def complete(self, system: str, user: str, max_tokens: int) -> str:
        """The model's whole reply to one system prompt and user message."""
        ...

    def stream(self, system: str, user: str, max_tokens: int) -> Iterator[str]:
        """The same reply, piece by piece as the model writes it."""
        ...

    def opening(self, system: str, user: str) -> list[dict]:
        """The messages a conversation with tools starts from (with the system prompt, where
        the API takes it as a message)."""
        ...

    def turn(self, system: str, messages: list[dict], tools: list[Tool], max_tokens: int
             ) -> tuple[str, list[ToolCall]]:
        """The model's next turn: its text and the tools it calls (none: it has replied);
        a turn that calls tools is appended to `messages`."""
        ...

    def results(self, messages: list[dict], calls: list[ToolCall], results: list[str]) -> None:
        """Append what the calls returned, as the API takes it."""
        ...


def converse(chat: ChatModel, system: str, user: str, tools: list[Tool],
             run: Callable[[ToolCall], str], max_tokens: int, rounds: int) -> str:
    """The model's reply once it stops calling tools, each call answered by `run`; at most
    `rounds` turns of calls (then ToolRoundsError: a model that never settles is a failure)."""
    messages = chat.opening(system, user)
    for _ in range(rounds + 1):
        text, calls = chat.turn(system, messages, tools, max_tokens)
        if not calls:
            return text
        chat.results(messages, calls, [run(call) for call in calls])
    raise ToolRoundsError(f"{chat.name} still called tools after {rounds} rounds")


def _function(tool: Tool) -> dict:
    """A tool as OpenAI's and Ollama's chat APIs both declare it."""
    return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": tool.parameters}}


def _object(arguments: object) -> dict | None:
    """Arguments as a dict: OpenAI writes them as a JSON string, Ollama as an object."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    return arguments if isinstance(arguments, dict) else None


class AnthropicChat:
    """Claude through the anthropic SDK (Messages API)."""

    def __init__(self, api_key: str, model: str, timeout: float, max_retries: int) -> None:
        # Deferred: the SDK takes about half a second to import, paid only by who chose it.
        import anthropic

        self.model = model
        self.name = f"claude/{model}"
        self.client: Any = anthropic.Anthropic(api_key=api_key, timeout=timeout,
                                               max_retries=max_retries)

    def request(self, system: str, user: str, max_tokens: int) -> dict:
        return {"model": self.model, "max_tokens": max_tokens, "system": system,
                "messages": [{"role": "user", "content": user}]}

    def complete(self, system: str, user: str, max_tokens: int) -> str:
        reply = self.client.messages.create(**self.request(system, user, max_tokens))
        blocks = getattr(reply, "content", None)
        if not isinstance(blocks, list):
            raise MalformedReplyError("the reply is not a Messages API message")
        return "".join(b.text for b in blocks if getattr(b, "type", None) == "text")

    def stream(self, system: str, user: str, max_tokens: int) -> Iterator[str]:
        with self.client.messages.stream(**self.request(system, user, max_tokens)) as stream:
            yield from stream.text_stream

    def opening(self, system: str, user: str) -> list[dict]:
        return [{"role": "user", "content": user}]  # the system prompt goes with each turn

    def turn(self, system: str, messages: list[dict], tools: list[Tool], max_tokens: int
             ) -> tuple[str, list[ToolCall]]:
        reply = self.client.messages.create(
            model=self.model, max_tokens=max_tokens, system=system, messages=messages,
            tools=[{"name": t.name, "description": t.description, "input_schema": t.parameters}
                   for t in tools])
        blocks = getattr(reply, "content", None)
        if not isinstance(blocks, list):
            raise MalformedReplyError("the reply is not a Messages API message")
        text = "".join(b.text for b in blocks if getattr(b, "type", None) == "text")
        uses = [b for b in blocks if getattr(b, "type", None) == "tool_use"]
        if uses:
            messages.append({"role": "assistant", "content": [
                {"type": "text", "text": b.text} if b.type == "text" else
                {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input}
                for b in blocks if b.type in ("text", "tool_use")]})
        return text, [ToolCall(u.id, u.name, _object(u.input)) for u in uses]

    def results(self, messages: list[dict], calls: list[ToolCall], results: list[str]) -> None:
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": result}
            for call, result in zip(calls, results, strict=True)]})


class OpenAIChat:
    """OpenAI chat completions through the openai SDK."""

    def __init__(self, api_key: str, model: str, timeout: float, max_retries: int) -> None:
        import openai  # deferred, as anthropic above

        self.model = model
        self.name = f"openai/{model}"
        self.client: Any = openai.OpenAI(api_key=api_key, timeout=timeout,
                                         max_retries=max_retries)

    def complete(self, system: str, user: str, max_tokens: int) -> str:
        # No temperature: reasoning models reject it, and the prompts pin their format.
        reply = self.client.chat.completions.create(
            model=self.model, messages=chat_messages(system, user),
            max_completion_tokens=max_tokens)
        choices = getattr(reply, "choices", None)
        if not choices:
            raise MalformedReplyError("the reply is not a chat completion")
        return choices[0].message.content or ""

    def stream(self, system: str, user: str, max_tokens: int) -> Iterator[str]:
        chunks = self.client.chat.completions.create(
            model=self.model, messages=chat_messages(system, user),
            max_completion_tokens=max_tokens, stream=True)
        with chunks:
            for chunk in chunks:
                if chunk.choices and chunk.choices[0].delta.content:
                    yield chunk.choices[0].delta.content

    def opening(self, system: str, user: str) -> list[dict]:
        return chat_messages(system, user)

    def turn(self, system: str, messages: list[dict], tools: list[Tool], max_tokens: int
             ) -> tuple[str, list[ToolCall]]:
        reply = self.client.chat.completions.create(
            model=self.model, messages=messages, max_completion_tokens=max_tokens,
            tools=[_function(t) for t in tools])
        choices = getattr(reply, "choices", None)
        if not choices:
            raise MalformedReplyError("the reply is not a chat completion")
        message = choices[0].message
        calls = [c for c in message.tool_calls or [] if getattr(c, "function", None)]
        if calls:
            messages.append({"role": "assistant", "content": message.content, "tool_calls": [
                {"id": c.id, "type": "function",
                 "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in calls]})
        return message.content or "", [
            ToolCall(c.id, c.function.name, _object(c.function.arguments)) for c in calls]

    def results(self, messages: list[dict], calls: list[ToolCall], results: list[str]) -> None:
        messages.extend({"role": "tool", "tool_call_id": call.id, "content": result}
                        for call, result in zip(calls, results, strict=True))


class OllamaChat:
    """A local model through Ollama's HTTP API (POST {OLLAMA_HOST}/api/chat), over httpx. No
    retries: Ollama runs nearby, and a failure there is not a network blip."""

    def __init__(self, host: str, model: str, timeout: float) -> None:
        # OLLAMA_HOST is often written without a scheme (127.0.0.1:11434), as Ollama allows.
        base_url = host if "://" in host else f"http://{host}"
        self.model = model
        self.name = f"ollama/{model}"
        self.client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)

    def request(self, system: str, user: str, max_tokens: int, stream: bool) -> dict:
        return {
            "model": self.model,
            "messages": chat_messages(system, user),
            "stream": stream,
            "options": {"temperature": 0, "num_predict": max_tokens},
        }

    def complete(self, system: str, user: str, max_tokens: int) -> str:
        response = self.client.post("/api/chat", json=self.request(system, user, max_tokens,
                                                                   False))
        response.raise_for_status()
        return ollama_reply_text(response.json())

    def stream(self, system: str, user: str, max_tokens: int) -> Iterator[str]:
        """Newline-delimited JSON objects, each with message.content, the last with "done":
        true. A stream that ends without it was cut off, and that is an error, not a reply."""
        request = self.request(system, user, max_tokens, True)
        with self.client.stream("POST", "/api/chat", json=request) as response:
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

    def opening(self, system: str, user: str) -> list[dict]:
        return chat_messages(system, user)

    def turn(self, system: str, messages: list[dict], tools: list[Tool], max_tokens: int
             ) -> tuple[str, list[ToolCall]]:
        request = {**self.request("", "", max_tokens, False), "messages": messages,
                   "tools": [_function(t) for t in tools]}
        response = self.client.post("/api/chat", json=request)
        response.raise_for_status()
        reply = response.json()
        text = ollama_reply_text(reply)
        asked = reply["message"].get("tool_calls") or []
        calls = [ToolCall("", c["function"].get("name", ""), _object(c["function"].get(
            "arguments"))) for c in asked if isinstance(c, dict)
            and isinstance(c.get("function"), dict)]
        if calls:
            messages.append({"role": "assistant", "content": text, "tool_calls": asked})
        return text, calls

    def results(self, messages: list[dict], calls: list[ToolCall], results: list[str]) -> None:
        messages.extend({"role": "tool", "tool_name": call.name, "content": result}
                        for call, result in zip(calls, results, strict=True))


def ollama_reply_text(reply: object, required: bool = True) -> str:
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


def make_chat(providers: ProviderSettings, provider: str, timeout: float, max_retries: int,
              chosen_by: str) -> AnthropicChat | OpenAIChat | OllamaChat:
    """The chat client of `provider` (claude, openai or ollama) with its model, server and key
    from `providers`; `max_retries` for a hosted API (Ollama runs nearby and is not retried).
    `chosen_by` names the setting that chose it (KB_LLM=claude), for the error it raises."""
    keys = {"claude": ("ANTHROPIC_API_KEY", providers.anthropic_api_key),
            "openai": ("OPENAI_API_KEY", providers.openai_api_key)}
    if provider in keys:
        variable, key = keys[provider]
        if not key:
            raise ChatConfigError(f"{chosen_by} needs {variable}")
        chat = AnthropicChat if provider == "claude" else OpenAIChat
        return chat(key, providers.model(provider), timeout, max_retries)
    if provider == "ollama":
        return OllamaChat(providers.ollama_host, providers.ollama_model, timeout)
    raise ChatConfigError(f"unknown provider in {chosen_by}: expected "
                          f"{', '.join(ProviderSettings.CHAT)}")
