"""The table computations offered to an LLM as tools: what each tool returns over a table's cells
(the same sentences a table answer states, with the [n] of the rows' passages), the errors a
model is told to correct, and the tool conversation over each provider's real SDK or HTTP API
against a server on 127.0.0.1 that calls the tools as the provider would."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from kb_core.chat_clients import ToolCall
from kb_search.answerers import Answer, answer_with_fallback, make_answerer, stream_with_fallback
from kb_search.tables import StoredRow, StoredTable
from kb_search.tables.tools import TableTools
from tests.unit.test_answerers import (  # noqa: F401 - the fixture clears provider variables
    LOG,
    PASSAGES,
    QUESTION,
    Reply,
    configure,
    model_server,
    no_provider_environment,
)

PARTS = StoredTable(
    document_id=7, table_no=0, title="保守部品価格表", path="eng/保守部品価格表.xlsx",
    location="シート: 価格表", caption="保守部品価格表",
    columns=["品番", "品名", "単価 (円)", "在庫数", "発注点", "仕入先"],
    units=[None, None, "円", None, None, None],
    notes=["※ 単価は税抜き。"],
    rows=[StoredRow(0, 71, ["P100", "ベアリング", "1,200", "5", "10", "中央ベアリング"]),
          StoredRow(1, 71, ["P200", "シール <b>", "39,800", "20", "5", "東洋精工"]),
          StoredRow(2, 72, ["P300", "ギア", "39,800", "2", "3", "中央ベアリング"]),
          StoredRow(3, 72, ["P400", "モーター", "15,000", "0", "1", "光和電子"])],
)
NUMBERS = {71: 6, 72: 7}  # the rows' passages, offered for citation as [6] and [7]


def called(name: str, **arguments: object) -> tuple[dict, TableTools]:
    tools = TableTools([PARTS], NUMBERS)
    return json.loads(tools.call(ToolCall("call_1", name, arguments))), tools


def test_a_cell_is_stated_with_its_unit_its_notes_and_the_passage_of_its_row():
    reply, tools = called("table_cell", table="T1", row="P300", columns=["単価"])
    # The note naming the column follows it, resting on the table's last row.
    assert reply == {"result": ["P300の単価は39,800円です。[7]", "※ 単価は税抜き。[7]"]}
    assert [c.value for c in tools.results[0].sentences[0].cells] == ["39,800"]


def test_an_extreme_states_a_tie_as_a_tie_and_cites_every_row_it_compared():
    reply, tools = called("table_extreme", table="t1", column="単価 (円)", largest=True)
    assert reply == {"result": [
        "価格表の4件のうち単価がいちばん大きいのはP200とP300（いずれも39,800円）です。[6][7]"]}
    assert tools.results[0].computed == ["4"]


def test_a_count_compares_a_column_with_another_and_lists_the_rows():
    reply, _ = called("table_count", table="T1",
                      where=[{"column": "在庫数", "op": "<", "than_column": "発注点"}])
    assert reply["result"][0] == "価格表で在庫数が発注点未満のものは3件です。[6][7]"
    assert reply["result"][1] == "該当：P100、P300、P400。[6][7]"


def test_a_count_by_a_cell_text_and_by_a_number():
    by_text, _ = called("table_count", table="T1",
                        where=[{"column": "仕入先", "op": "=", "value": "中央ベアリング"}])
    by_number, _ = called("table_count", table="T1",
                          where=[{"column": "単価", "op": ">=", "value": "15,000"}])
    assert "3件" not in by_text["result"][0] and "は2件です" in by_text["result"][0]
    assert by_number["result"][0] == "価格表で単価が15,000以上のものは3件です。[6][7]"


def test_a_comparison_states_both_values():
    reply, _ = called("table_compare", table="T1", rows=["P100", "P400"], column="単価",
                      largest=False)
    assert reply == {"result": [
        "P100のほうが単価が小さいです（P100 1,200円、P400 15,000円）。[6][7]"]}


@pytest.mark.parametrize(("name", "arguments", "error"), [
    ("table_cell", {"table": "T9", "row": "P100", "columns": ["単価"]}, "no table 'T9'"),
    ("table_cell", {"table": "T1", "row": "P999", "columns": ["単価"]}, "has no row 'P999'"),
    ("table_cell", {"table": "T1", "row": "P100", "columns": ["重量"]},
     "names no column of 価格表: the columns are 品番 | 品名 | 単価 (円)"),
    ("table_count", {"table": "T1", "where": [{"column": "単価", "op": ">", "value": "高い"}]},
     "'高い' is not a number"),
    ("table_count", {"table": "T1", "where": [{"column": "単価", "op": "~", "value": "1"}]},
     "op must be one of"),
    ("table_compare", {"table": "T1", "rows": ["P100"], "column": "単価"}, "two rows"),
    ("table_sum", {"table": "T1"}, "no tool 'table_sum'"),
])
def test_a_call_naming_what_the_tables_lack_is_told_what_they_hold_and_computes_nothing(
        name, arguments, error):
    reply, tools = called(name, **arguments)
    assert error in reply["error"]
    assert tools.results == []


def test_arguments_that_are_not_an_object_are_an_error_not_a_crash():
    tools = TableTools([PARTS], NUMBERS)
    assert json.loads(tools.call(ToolCall("c", "table_count", None))) == {
        "error": "the arguments are not a JSON object"}


def test_a_column_the_row_leaves_empty_is_not_found():
    table = StoredTable(**{**{f: getattr(PARTS, f) for f in PARTS.__struct_fields__},
                           "rows": [StoredRow(0, 71, ["P100", "ベアリング", "", "5", "10", "x"])]})
    tools = TableTools([table], NUMBERS)
    reply = json.loads(tools.call(ToolCall("c", "table_cell", {
        "table": "T1", "row": "P100", "columns": ["単価"]})))
    assert "not_found" in reply and tools.results == []


def test_the_catalogue_names_each_table_its_columns_units_keys_and_passages_escaped():
    described = TableTools([PARTS], NUMBERS).described()
    assert described.startswith("<tables>\n") and described.endswith("\n</tables>")
    assert '<table id="T1" name="価格表" rows="4" documents="[6][7]">' in described
    assert "columns: 品番 | 品名 | 単価 (円) | 在庫数 | 発注点 | 仕入先" in described
    assert "rows: P100、P200、P300、P400" in described
    assert "note: ※ 単価は税抜き。" in described


# The tool conversation over each provider's wire: the model calls table_count, reads the
# result, and answers from it.
COUNT_CALL = {"table": "T1", "where": [{"column": "仕入先", "op": "=", "value": "中央ベアリング"}]}
FINAL = "中央ベアリングから仕入れる部品は2件です[6]。"


def anthropic_turn(body: dict) -> bytes:
    last = body["messages"][-1]["content"]
    content = ([{"type": "text", "text": FINAL}] if isinstance(last, list) else
               [{"type": "text", "text": "表を数えます。"},
                {"type": "tool_use", "id": "toolu_1", "name": "table_count",
                 "input": COUNT_CALL}])
    return json.dumps({"id": "msg_1", "type": "message", "role": "assistant",
                       "model": "claude-sonnet-4-5", "content": content,
                       "stop_reason": "end_turn" if isinstance(last, list) else "tool_use",
                       "stop_sequence": None,
                       "usage": {"input_tokens": 10, "output_tokens": 5}}).encode()


def openai_turn(body: dict) -> bytes:
    done = body["messages"][-1]["role"] == "tool"
    message = ({"role": "assistant", "content": FINAL} if done else
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1", "type": "function",
                    "function": {"name": "table_count", "arguments": json.dumps(COUNT_CALL)}}]})
    return json.dumps({"id": "c1", "object": "chat.completion", "created": 1764400000,
                       "model": "gpt-4o-mini", "choices": [{
                           "index": 0, "finish_reason": "stop" if done else "tool_calls",
                           "logprobs": None, "message": message}]}).encode()


def ollama_turn(body: dict) -> bytes:
    done = body["messages"][-1]["role"] == "tool"
    message = ({"role": "assistant", "content": FINAL} if done else
               {"role": "assistant", "content": "", "tool_calls": [
                   {"function": {"name": "table_count", "arguments": COUNT_CALL}}]})
    return json.dumps({"model": "qwen2.5:7b", "created_at": "2026-12-07T00:00:00Z",
                       "message": message, "done": True}, ensure_ascii=False).encode()


def tool_result(provider: str, body: dict) -> str:
    """What the second request returns to the model, checked against the provider's form."""
    last = body["messages"][-1]
    if provider == "claude":
        [block] = last["content"]
        assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_1"
        assert body["messages"][-2]["content"][1]["type"] == "tool_use"
        return block["content"]
    if provider == "openai":
        assert last["tool_call_id"] == "call_1"
        assert body["messages"][-2]["tool_calls"][0]["id"] == "call_1"
    else:
        assert last["tool_name"] == "table_count"
    return last["content"]


def declared(provider: str, body: dict) -> list[str]:
    if provider == "claude":
        return [t["name"] for t in body["tools"]]
    return [t["function"]["name"] for t in body["tools"]]


TURNS: dict[str, Callable[[dict], bytes]] = {
    "claude": anthropic_turn, "openai": openai_turn, "ollama": ollama_turn}


@pytest.mark.parametrize("provider", list(TURNS))
def test_the_model_calls_a_tool_reads_its_result_and_answers_from_it(provider, monkeypatch):
    with model_server(lambda body: Reply([TURNS[provider](body)])) as server:
        answerer = make_answerer(configure(provider, server.url, monkeypatch))
        tools = TableTools([PARTS], NUMBERS)
        answer = answerer.answer("中央ベアリングの部品はいくつ？", PASSAGES, tools)
    assert answer.text == FINAL and answer.cited == [6]
    first, second = (body for _, body in server.requests)
    assert declared(provider, first) == ["table_cell", "table_extreme", "table_count",
                                         "table_compare"]
    assert '<table id="T1"' in first["messages"][0 if provider == "claude" else 1]["content"]
    assert json.loads(tool_result(provider, second)) == {"result": [
        "価格表で仕入先が中央ベアリングのものは2件です。[6][7]", "該当：P100、P300。[6][7]"]}
    assert [r.computed for r in tools.results] == [["2"]]


@pytest.mark.parametrize("provider", list(TURNS))
def test_a_streamed_answer_with_tools_arrives_whole(provider, monkeypatch):
    with model_server(lambda body: Reply([TURNS[provider](body)])) as server:
        answerer = make_answerer(configure(provider, server.url, monkeypatch))
        stream = stream_with_fallback(answerer, QUESTION, PASSAGES, LOG,
                                      TableTools([PARTS], NUMBERS))
        assert list(stream) == [FINAL]
    assert stream.result().text == FINAL
    assert not any(body.get("stream") for _, body in server.requests)


def test_a_model_that_never_stops_calling_tools_costs_the_answer_ready_instead(monkeypatch):
    def calling_forever(body: dict) -> Reply:
        return Reply([anthropic_turn({"messages": [{"content": "again"}]})])

    ready = Answer(text="P100とP300の2件です。[6]", found=True, cited=[6], answerer="table")
    with model_server(calling_forever) as server:
        answerer = make_answerer(configure("claude", server.url, monkeypatch))
        answer = answer_with_fallback(answerer, QUESTION, PASSAGES, LOG,
                                      TableTools([PARTS], NUMBERS), ready)
    assert len(server.requests) == 5  # the first turn and four rounds of calls
    assert answer.text == ready.text
    assert answer.answerer == ("table (fallback: claude/claude-sonnet-4-5 failed: "
                               "ToolRoundsError)")
