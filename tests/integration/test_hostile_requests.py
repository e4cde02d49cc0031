"""Requests no handler should meet, through the real app over the indexed samples: JSON nested
past any request's depth, NUL in any parameter, and no response naming a server's file."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from litestar.testing import AsyncTestClient

from tests.integration.test_service import bearer, make_client, tokens  # noqa: F401 - fixture

pytestmark = pytest.mark.anyio

NESTED = b'{"x":' * 5000 + b"1" + b"}" * 5000
NUL = "給与\x00支給日"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client(sample_index_url) -> AsyncIterator[AsyncTestClient]:
    async with make_client(sample_index_url, embedder="hashing",
                           reviewer_group="all-employees") as c:
        yield c


async def test_json_nested_past_any_request_is_a_clear_400(client, tokens):  # noqa: F811
    headers = bearer(tokens["portal"]) | {"Content-Type": "application/json"}
    for path in ("/v1/search", "/v1/ask", "/v1/feedback", "/v1/corrections"):
        response = await client.post(path, content=NESTED, headers=headers)
        assert response.status_code == 400, (path, response.text)
        assert "nested deeper than 64" in response.json()["detail"]
    # An array nested as deep as a request ever is still decodes (and is refused as a
    # body of another shape, not as a depth).
    response = await client.post("/v1/search", content=b'{"query": [[[["x"]]]]}',
                                 headers=headers)
    assert response.status_code == 400 and "nested" not in response.json()["detail"]


async def test_json_nested_past_any_request_is_a_json_rpc_parse_error_over_mcp(
        client, tokens):  # noqa: F811
    headers = bearer(tokens["portal"]) | {"Content-Type": "application/json",
                                          "Accept": "application/json, text/event-stream"}
    response = await client.post("/mcp", content=NESTED, headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == -32700
    # Malformed JSON the SDK parses itself is answered alike.
    malformed = await client.post("/mcp", content=b'{"jsonrpc": ', headers=headers)
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == -32700


def _string_parameters(schema: dict) -> Iterator[tuple[str, str, str, str]]:
    """(method, path template, parameter, where) of every string parameter of the schema."""
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                kinds = {parameter.get("schema", {}).get("type")} | {
                    option.get("type") for option in parameter.get("schema", {}).get("oneOf", [])}
                if "string" in kinds and parameter["in"] in ("query", "path"):
                    yield method.upper(), path, parameter["name"], parameter["in"]


async def test_nul_in_any_string_parameter_is_no_server_error(client, tokens):  # noqa: F811
    schema = (await client.get("/schema/openapi.json")).json()
    cases = list(_string_parameters(schema))
    # The sign-in callback is no API (not in the schema); its `state` comes from the browser.
    cases.append(("GET", "/auth/callback", "state", "query"))
    assert ("GET", "/v1/entities", "name", "query") in cases
    assert ("GET", "/v1/entities/{entity_id}", "entity_id", "path") in cases
    for method, template, name, where in cases:
        path, params = template, {}
        for other in _string_parameters({"paths": {template: schema["paths"].get(template, {})}}):
            if other[3] == "path":
                path = path.replace("{" + other[2] + "}", "1")
        if where == "path":
            path = template.replace("{" + name + "}", quote(NUL, safe=""))
        else:
            params[name] = NUL
        response = await client.request(method, path, params=params,
                                        headers=bearer(tokens["portal"]))
        assert response.status_code < 500, (method, template, name, response.text)


async def test_entities_find_a_name_holding_nul_as_its_text_with_u_fffd(client, tokens):  # noqa: F811
    response = await client.get("/v1/entities", params={"name": "ZP-2041\x00"},
                                headers=bearer(tokens["portal"]))
    assert response.status_code == 200 and response.json() == {"entities": []}


def _absolute_paths(value: object) -> Iterator[str]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _absolute_paths(v)
    elif isinstance(value, list):
        for v in value:
            yield from _absolute_paths(v)
    elif isinstance(value, str) and os.path.isabs(value) and Path(value).exists():
        yield value


async def test_no_json_response_names_a_file_of_the_server(client, tokens):  # noqa: F811
    headers = bearer(tokens["portal"])
    responses = [
        await client.post("/v1/search", json={"query": "ZP-2041の保証期間"}, headers=headers),
        await client.post("/v1/ask", json={"question": "ZP-2041の保証期間は？"}, headers=headers),
        await client.get("/v1/recent-questions", headers=headers),
        await client.get("/v1/gaps", headers=headers),
    ]
    found = (await client.get("/v1/entities", params={"name": "ZP-2041"}, headers=headers))
    responses.append(found)
    for entity in found.json()["entities"]:
        card = await client.get(f"/v1/entities/{entity['id']}", headers=headers)
        assert card.json()["documents"], card.text  # a card with documents, each named
        responses.append(card)
    hit = responses[0].json()["hits"][0]
    responses.append(await client.get(f"/v1/documents/{hit['document_id']}", headers=headers))
    responses.append(await client.get(f"/v1/documents/{hit['document_id']}",
                                      params={"chunk_id": hit["chunk_id"]}, headers=headers))
    for response in responses:
        assert response.status_code == 200, (response.url, response.text)
        assert list(_absolute_paths(response.json())) == [], response.url
