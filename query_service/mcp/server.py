"""The MCP server over a knowledge base: the tools `search`, `ask`, `get_document`, `entity`
and `feedback`, and a passage of a document as a resource, for a caller that each transport
verifies its own way (`CallerOf`). Transport-neutral: stdio (`kb mcp`) and Streamable HTTP
(query_service/mcp/http.py) run the same server.

Built on the SDK's low-level `Server`, not FastMCP: the tools' input and output schemas come
from the msgspec structs of query_service/mcp/results.py (one statement of each shape), and
FastMCP would rebuild them as pydantic models and reconfigure this process's logging."""

from __future__ import annotations

import importlib.metadata
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import msgspec
import psycopg
import psycopg_pool
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.shared.exceptions import McpError
from pydantic import AnyUrl

from kb_core.callers import Caller
from kb_search import KnowledgeBase, UnknownQueryError
from query_service.errors import QuestionTooLongError
from query_service.hostile_input import storable
from query_service.limits import QuestionLimit
from query_service.mcp import results
from query_service.mcp.descriptions import INSTRUCTIONS, RESOURCE, TOOLS

__all__ = ["SERVER_NAME", "CallerOf", "CallerRefused", "knowledge_server"]

log = logging.getLogger(__name__)

SERVER_NAME = "kb-search"
PASSAGE_TEMPLATE = "kb://documents/{document_id}/passages/{chunk_id}"
_PASSAGE_URI = re.compile(r"kb://documents/([1-9][0-9]{0,17})/passages/([1-9][0-9]{0,17})")
RESOURCE_NOT_FOUND = -32002  # the MCP specification's code for an unknown resource

# The caller of one request: `request` is the HTTP request the transport received (None over
# stdio). Raises CallerRefused when there is no verified caller.
CallerOf = Callable[[Any], Awaitable[Caller]]


class CallerRefused(Exception):
    """No verified caller (an unknown or revoked token); `reason` holds no secret."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ToolRefusal(Exception):
    """A call the assistant can correct: its message is the tool's error text."""


@dataclass(frozen=True)
class _Tool:
    arguments: type[msgspec.Struct]
    result: type[msgspec.Struct]
    read_only: bool
    run: Callable[[Caller, Any], Awaitable[msgspec.Struct]]


class _KnowledgeTools:
    """Each tool as the engine's face does it, in a worker thread (it embeds and scores on
    the CPU and waits on the database), for the verified caller only."""

    def __init__(self, knowledge_base: KnowledgeBase, question_limit: QuestionLimit) -> None:
        self.kb = knowledge_base
        self.question_limit = question_limit

    def table(self) -> dict[str, _Tool]:
        return {
            "search": _Tool(results.SearchArguments, results.SearchPassages, True, self.search),
            "ask": _Tool(results.AskArguments, results.Answer, False, self.ask),
            "get_document": _Tool(results.DocumentArguments, results.DocumentPassages, True,
                                  self.get_document),
            "entity": _Tool(results.EntityArguments, results.EntityFound, True, self.entity),
            "feedback": _Tool(results.FeedbackArguments, results.FeedbackReceipt, False,
                              self.feedback),
        }

    async def search(self, caller: Caller,
                     args: results.SearchArguments) -> results.SearchPassages:
        query = self._checked(args.query, "query")
        found = await anyio.to_thread.run_sync(self.kb.questions.search, caller, query, args.k,
                                               args.mode)
        return results.passages_of(found)

    async def ask(self, caller: Caller, args: results.AskArguments) -> results.Answer:
        # Logged by the face with the caller's kind and subject, as an answer over /v1 is.
        question = self._checked(args.question, "question")
        try:
            return results.answer_of(await anyio.to_thread.run_sync(
                lambda: self.kb.questions.ask(caller, question, mode=args.mode,
                                              follows=args.follows)))
        except UnknownQueryError as exc:
            raise ToolRefusal(str(exc)) from None

    async def get_document(self, caller: Caller,
                           args: results.DocumentArguments) -> results.DocumentPassages:
        view = await anyio.to_thread.run_sync(self.kb.sources.document, caller,
                                              args.document_id, args.chunk_id)
        if view is None:  # the same whether it does not exist or the caller may not read it
            raise ToolRefusal("no such passage of a document this caller may read")
        return results.document_passages_of(view)

    async def entity(self, caller: Caller, args: results.EntityArguments) -> results.EntityFound:
        name = storable(args.name)

        def found() -> results.EntityFound:
            matches = self.kb.entities.find(caller, name)
            return results.entity_found(
                matches, self.kb.entities.card(caller, matches[0].id) if matches else None)

        return await anyio.to_thread.run_sync(found)

    async def feedback(self, caller: Caller,
                       args: results.FeedbackArguments) -> results.FeedbackReceipt:
        comment = None if args.comment is None else storable(args.comment)
        found = await anyio.to_thread.run_sync(
            self.kb.query_log.feedback, caller, str(uuid.UUID(args.query_id)), args.helpful,
            comment)
        if not found:
            raise ToolRefusal("no such query for this caller")
        return results.FeedbackReceipt(ok=True)

    async def passage(self, caller: Caller, uri: str) -> str:
        """The passage resource: the passages of `get_document`, each a quoted block."""
        match = _PASSAGE_URI.fullmatch(uri)
        view = None if match is None else await anyio.to_thread.run_sync(
            self.kb.sources.document, caller, int(match[1]), int(match[2]))
        if view is None:
            raise _refused(RESOURCE_NOT_FOUND, "no such passage of a document this caller "
                                               "may read")
        return "\n".join(p.passage for p in results.document_passages_of(view).passages)

    def _checked(self, text: str, field: str) -> str:
        return storable(self.question_limit.check(text, field))


def _listed(name: str, tool: _Tool) -> types.Tool:
    text = TOOLS[name]
    return types.Tool(
        name=name, title=text.title, description=text.description,
        inputSchema=results.object_schema(tool.arguments),
        outputSchema=results.object_schema(tool.result),
        annotations=types.ToolAnnotations(
            title=text.title, readOnlyHint=tool.read_only, destructiveHint=False,
            idempotentHint=tool.read_only, openWorldHint=False))


def _refused(code: int, message: str) -> McpError:
    return McpError(types.ErrorData(code=code, message=message))


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                isError=True)


def knowledge_server(knowledge_base: KnowledgeBase, caller_of: CallerOf, *,
                     question_limit: QuestionLimit) -> Server:
    """The MCP server of `knowledge_base`: every tool call and resource read asks `caller_of`
    for the verified caller of its request, whose groups alone filter what it returns."""
    server: Server = Server(SERVER_NAME, version=importlib.metadata.version("kb-search"),
                            instructions=INSTRUCTIONS)
    tools = _KnowledgeTools(knowledge_base, question_limit)
    table = tools.table()
    listed = [_listed(name, tool) for name, tool in table.items()]

    async def caller() -> Caller:
        return await caller_of(server.request_context.request)

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return listed

    # The SDK checks the arguments against the input schema first (validate_input) and the
    # structured result against the output schema after.
    @server.call_tool()
    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        tool = table.get(name)
        if tool is None:
            return _error(f"unknown tool {name!r}")
        try:
            args = msgspec.convert(arguments, tool.arguments, strict=False)
            result = await tool.run(await caller(), args)
        except CallerRefused as exc:
            return _error(f"unauthorized: {exc.reason}")
        except (ToolRefusal, QuestionTooLongError, msgspec.ValidationError) as exc:
            return _error(str(exc))
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            log.warning("MCP %s: database unavailable: %s", name, exc)
            return _error("the database is unreachable; retry shortly")
        except Exception:  # logged; the assistant gets no stack trace
            log.exception("MCP tool %s failed", name)
            return _error("an unexpected error occurred; it has been logged")
        # Text for assistants that read only content: the same JSON, with Japanese unescaped.
        text = msgspec.json.encode(result).decode()
        return [types.TextContent(type="text", text=text)], msgspec.to_builtins(result)

    @server.list_resources()
    async def list_resources() -> list[types.Resource]:
        return []  # documents are reached from results (templates), never enumerated

    @server.list_resource_templates()
    async def list_resource_templates() -> list[types.ResourceTemplate]:
        return [types.ResourceTemplate(
            uriTemplate=PASSAGE_TEMPLATE, name="passage", title=RESOURCE.title,
            description=RESOURCE.description, mimeType="text/plain")]

    @server.read_resource()
    async def read_resource(uri: AnyUrl) -> list[ReadResourceContents]:
        try:
            text = await tools.passage(await caller(), str(uri))
        except CallerRefused as exc:
            raise _refused(types.INVALID_REQUEST, f"unauthorized: {exc.reason}") from None
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            log.warning("MCP resource: database unavailable: %s", exc)
            raise _refused(types.INTERNAL_ERROR,
                           "the database is unreachable; retry shortly") from None
        return [ReadResourceContents(content=text, mime_type="text/plain")]

    return server
