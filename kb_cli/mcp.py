"""`kb mcp`: the knowledge base as an MCP server on stdin and stdout, for an AI assistant or an
IDE that starts it (docs/mcp.md). It reads as the app holding the API token the operator gives
(`kb token create`): that token's groups filter every passage, the token is checked again on
every call (a revoked one stops working at once), and answers go to the query log under its
name, as over HTTP."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import stat
import sys
from io import TextIOWrapper
from pathlib import Path

import anyio
from mcp.server.stdio import stdio_server
from psycopg_pool import AsyncConnectionPool

from kb_core.api_tokens import TOKEN_PREFIX, TokenStore
from kb_core.callers import Caller
from kb_core.migrations import prepare_database
from kb_core.settings import Settings
from kb_search import KnowledgeBase, open_knowledge_base
from query_service.limits import QuestionLimit
from query_service.mcp.server import CallerOf, CallerRefused, knowledge_server

__all__ = ["run"]

log = logging.getLogger("kb.mcp")

REFUSED = 2  # the exit status for a token that cannot be used


class TokenFileError(Exception):
    """The token file cannot be used; the message says why, without the token."""


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        token = read_token(Path(args.token_file))
    except TokenFileError as exc:
        print(f"kb mcp: {exc}", file=sys.stderr)
        return REFUSED
    protocol = _protocol_stdout()
    settings = prepare_database(settings)
    return anyio.run(_serve, settings, token, protocol)


def read_token(path: Path) -> str:
    """The API token in `path` (one line); TokenFileError when there is none."""
    try:
        mode = path.stat().st_mode
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"cannot read the token file {path}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
    if not token.startswith(TOKEN_PREFIX) or len(token.split()) != 1:
        raise TokenFileError(f"{path} holds no API token (one line, from kb token create)")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("the token file %s can be read by others: chmod 600 it", path)
    return token


def _protocol_stdout() -> anyio.AsyncFile[str]:
    """This process's stdout, kept for the protocol alone: file descriptor 1 then points at
    stderr, so nothing else that prints (a library's progress line, a C library's warning)
    can break the stream the assistant parses."""
    sys.stdout.flush()
    protocol = TextIOWrapper(os.fdopen(os.dup(1), "wb"), encoding="utf-8")
    os.dup2(2, 1)
    return anyio.wrap_file(protocol)


async def _serve(settings: Settings, token: str, protocol: anyio.AsyncFile[str]) -> int:
    async with AsyncConnectionPool(settings.database_url, min_size=1, max_size=1, open=False,
                                   check=AsyncConnectionPool.check_connection,
                                   name="identity") as pool:
        caller_of = token_holder(pool, token)
        try:
            caller = await caller_of(None)
        except CallerRefused as exc:
            print(f"kb mcp: {exc.reason}; see kb token list", file=sys.stderr)
            return REFUSED
        log.info("MCP server on stdio for %r (groups %s)", caller.subject,
                 ", ".join(caller.groups))
        knowledge_base: KnowledgeBase = await anyio.to_thread.run_sync(
            functools.partial(open_knowledge_base, settings, connections=2))
        with knowledge_base:
            server = knowledge_server(
                knowledge_base, caller_of,
                question_limit=QuestionLimit(settings.service.max_question_chars))
            async with stdio_server(stdout=protocol) as (read, write):
                await server.run(read, write, server.create_initialization_options())
    return 0


def token_holder(pool: AsyncConnectionPool, token: str) -> CallerOf:
    """The app holding `token`, verified on each call as the HTTP door verifies a request."""

    async def holder(_request: object) -> Caller:
        async with pool.connection() as aconn:
            caller = await TokenStore.verify(aconn, token)
        if caller is None:
            raise CallerRefused("the API token is unknown or revoked")
        return caller

    return holder
