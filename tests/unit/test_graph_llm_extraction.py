"""The LLM entity extractor's offline part (kb_pipeline/graph_llm.py): what of a model's reply
joins a passage's graph (the evidence tie, the rules' precedence, the kinds), what a reply that
is no extraction does, and how KB_GRAPH_LLM is read. Its provider calls are tested against fake
servers in tests/integration/test_graph_llm.py."""

from __future__ import annotations

import json

import pytest

from kb_core.chat_clients import ChatConfigError
from kb_core.embeddings import make_embedder
from kb_core.entities import passage_graph
from kb_core.settings import EmbedderSettings, Settings
from kb_pipeline.graph_llm import (
    Extraction,
    MalformedExtractionError,
    make_graph_extractor,
    merge_extraction,
    parse_extraction,
)
from kb_pipeline.stages import pipeline_version

PASSAGE = ("【品質検査報告書 QC-2031】\n品質検査報告書 QC-2031\n"
           "ZP-2041のギヤハウジングで寸法不良。対象ロットは湖西工場製。\n"
           "| 拠点 | 品質責任者 |\n| 湖西工場 | 杉本 亮介 |\n")


def reading(entities: list[dict], relations: list[dict] | None = None) -> Extraction:
    return parse_extraction(json.dumps({"entities": entities, "relations": relations or []},
                                       ensure_ascii=False))


def merged(extraction: Extraction, text: str = PASSAGE):
    graph, dropped = merge_extraction(text, passage_graph(text), extraction)
    return {e.key: e for e in graph.entities}, graph.references, dropped


def test_an_entity_the_passage_does_not_name_is_dropped():
    entities, _, dropped = merged(reading([
        {"name": "北村 由美", "kind": "person", "description": "本社工場の品質責任者"},
        {"name": "杉本 亮介", "kind": "person", "description": "湖西工場の品質責任者"}]))
    assert "北村由美" not in entities and dropped == 1
    assert entities["杉本亮介"].description == "湖西工場の品質責任者"


def test_codes_that_differ_in_a_digit_are_never_merged_nor_found_inside_a_longer_one():
    entities, _, dropped = merged(reading([
        {"name": "ZP-2014", "kind": "code", "description": "別の製品"},
        {"name": "ZP-204", "kind": "code"},
        {"name": "ZP2041", "kind": "product", "description": "寸法不良の製品"}]))
    assert "zp-2014" not in entities and "zp-204" not in entities and dropped == 2
    assert entities["zp-2041"].description == "寸法不良の製品"


def test_the_rules_keep_their_kind_and_name_and_gain_the_model_s_description():
    entities, _, _ = merged(reading([{"name": "qc2031", "kind": "document",
                                      "description": "ギヤハウジングの寸法不良の報告"}]))
    assert (entities["qc-2031"].kind, entities["qc-2031"].name) == ("code", "QC-2031")
    assert entities["qc-2031"].description == "ギヤハウジングの寸法不良の報告"


def test_a_new_entity_takes_the_kind_the_rules_give_its_name_else_thing():
    text = "【製造記録】\n対象ロットは湖西工場製のギヤハウジング。"
    assert "湖西工場" not in {e.key for e in passage_graph(text).entities}
    entities, _, _ = merged(reading([{"name": "湖西工場", "kind": "organization"},
                                     {"name": "ギヤハウジング", "kind": "product"}]), text)
    assert entities["湖西工場"].kind == "unit"
    assert entities["ギヤハウジング"].kind == "thing"


def test_relations_join_only_entities_of_the_passage_and_are_of_kind_llm():
    _, references, _ = merged(reading(
        [{"name": "ギヤハウジング", "kind": "product", "description": "部品"}],
        [{"source": "ギヤハウジング", "target": "ZP-2041", "description": "ZP-2041の部品"},
         {"source": "ZP-2041", "target": "ZP-2014", "description": "幻の関係"},
         {"source": "北村由美", "target": "湖西工場"},
         {"source": "湖西工場", "target": "湖西工場"}]))
    stated = [r for r in references if r.kind == "llm"]
    assert [(r.source, r.target, r.description) for r in stated] == [
        ("ギヤハウジング", "zp-2041", "ZP-2041の部品")]
    assert all(r.description is None for r in references if r.kind != "llm")


def test_descriptions_are_one_line_and_bounded_and_numbers_are_no_entities():
    entities, _, dropped = merged(reading([
        {"name": "ギヤハウジング", "description": "長い\n説明" * 200},
        {"name": "2041", "kind": "thing"}]))
    assert "\n" not in entities["ギヤハウジング"].description
    assert len(entities["ギヤハウジング"].description) == 200
    assert dropped == 1


@pytest.mark.parametrize("reply", ["エンティティはありません。", '{"entities": [{"kind": "code"}]}',
                                   '{"entities": "QC-2031"}', "{not json}"])
def test_a_reply_that_is_no_extraction_is_refused(reply):
    with pytest.raises(MalformedExtractionError):
        parse_extraction(reply)


def test_a_fenced_reply_and_missing_fields_are_read():
    extraction = parse_extraction('```json\n{"entities": [{"name": "QC-2031"}]}\n```')
    assert extraction.entities[0].name == "QC-2031" and extraction.relations == []


def test_kb_llm_alone_never_switches_the_extractor_on():
    settings = Settings.from_env({"KB_LLM": "claude", "ANTHROPIC_API_KEY": "k"})
    assert settings.graph_llm.provider == ""
    assert make_graph_extractor(settings.graph_llm) is None


def test_an_unknown_extractor_or_a_missing_key_is_refused_naming_the_variable():
    with pytest.raises(ValueError, match="KB_GRAPH_LLM"):
        Settings.from_env({"KB_GRAPH_LLM": "gpt"})
    for provider, key in (("claude", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")):
        settings = Settings.from_env({"KB_GRAPH_LLM": provider})
        with pytest.raises(ChatConfigError, match=f"KB_GRAPH_LLM={provider} needs {key}"):
            make_graph_extractor(settings.graph_llm)


def test_turning_the_extractor_on_or_changing_its_model_changes_the_pipeline_version():
    embedder = make_embedder(EmbedderSettings("hashing"))
    off = pipeline_version(embedder, Settings.from_env({}).graph_llm)
    on = pipeline_version(embedder, Settings.from_env({"KB_GRAPH_LLM": "claude"}).graph_llm)
    other = pipeline_version(embedder, Settings.from_env(
        {"KB_GRAPH_LLM": "claude", "KB_ANTHROPIC_MODEL": "claude-haiku-4-5"}).graph_llm)
    assert off == pipeline_version(embedder)
    assert len({off, on, other}) == 3 and "claude/claude-sonnet-4-5" in on
