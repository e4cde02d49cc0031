"""The MCP door: the knowledge base as tools an AI assistant calls (Model Context Protocol,
docs/mcp.md), one more door on the engine's face.

- `query_service.mcp.server`: the tools (`search`, `ask`, `get_document`, `feedback`) and the
  passage resources, over a KnowledgeBase, for a caller each transport verifies its own way;
- `query_service.mcp.http`: Streamable HTTP mounted at /mcp in the query service, behind the
  same bearer tokens and company JWTs, rate limits and body limit as /v1;
- `kb mcp` (kb_cli/mcp.py): stdio, as the holder of an API token the operator gives.

Nothing is imported here: `kb mcp` loads the server without Litestar.
"""
