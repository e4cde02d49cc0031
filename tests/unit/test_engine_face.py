"""The engine's one face (issues 42 and 59): what `kb_search` offers the doors, listed, so that a
change to it is a deliberate one. The root holds one service per concern and shows no pool,
connection, searcher or grounded answerer: a door that needed one would be reaching inside the
engine. The doors' imports are held by import-linter contracts in pyproject.toml ("Doors use the
engine through its face", "Doors run no SQL of their own")."""

from __future__ import annotations

import inspect
import tomllib

import kb_search
from kb_core.settings import REPO_ROOT
from kb_search import (
    Corrections,
    Entities,
    Gaps,
    KnowledgeBase,
    Operations,
    QueryLog,
    Questions,
    Sources,
    open_knowledge_base,
)

PUBLIC_NAMES = {
    # the root, how it is opened, and its services
    "KnowledgeBase", "open_knowledge_base",
    "Questions", "QueryLog", "Sources", "Corrections", "Entities", "Gaps", "Operations",
    # what their results are made of
    "AnswerDelta", "AnswerEvent", "AnswerPart", "AskResult", "Assessment", "Citation",
    "CitationNumber", "Comparison", "Stage", "StagePart",
    "CorrectedPassage", "CorrectionForReview", "DocumentPassage", "DocumentView",
    "OfferedPassage", "OfferedPassages", "Original", "Ranks", "SearchHit", "SearchResult",
    # what each of those that names a passage extends, and how one is made from another
    "PassageRef", "ReadByOcr", "reference",
    "GapDocument", "GapQuestion", "GapReport", "GapTopic", "StaleDocument", "UncitedDocument",
    "EntityCard", "EntityDocument", "EntityLink", "EntityMatch", "EntityPassage",
    "EntityRelation", "RelationEvidence",
    "IndexCounts", "IndexGeneration", "IndexStatus", "IndexedDocument",
    "RecentQuestion", "ReopenedCitation", "ReopenedTurn",
    # what they refuse with
    "ChangedOriginalError", "CorrectionError", "UnknownCorrectionError", "UnknownQueryError",
    # the contract's constants, the path-only view of a result, a passage fenced as quoted text
    "ASK_MODES", "AskMode", "MAX_PASSAGES", "MODES", "Mode", "NOT_FOUND", "public",
    "quoted_passage",
}

# The root's services, by attribute, with their type.
SERVICES = {"questions": Questions, "query_log": QueryLog, "sources": Sources,
            "corrections": Corrections, "entities": Entities, "gaps": Gaps,
            "operations": Operations}

INSIDES = ("Pool", "Connection", "Searcher", "GroundedAnswers", "ReadRouter", "AnswerFlow",
           "psycopg")


def _offers(service: type) -> set[str]:
    return {name for name in dir(service) if not name.startswith("_")}


def test_the_package_offers_the_root_its_services_and_their_types_only():
    assert set(kb_search.__all__) == PUBLIC_NAMES
    for name in PUBLIC_NAMES:
        assert hasattr(kb_search, name), name


def test_the_root_holds_one_service_per_concern_and_nothing_else():
    signature = inspect.signature(KnowledgeBase.__init__)
    assert {name: p.annotation for name, p in signature.parameters.items()
            if p.kind is p.KEYWORD_ONLY} == {name: t.__name__ for name, t in SERVICES.items()}
    assert _offers(KnowledgeBase) == {"close"}
    assert list(inspect.signature(open_knowledge_base).parameters) == [
        "settings", "connections", "generation", "answers", "outage_ok"]


def test_questions_search_answer_and_assess():
    assert _offers(Questions) == {"search", "ask", "ask_events", "assess", "assess_follow_up"}


def test_the_query_log_records_takes_feedback_recalls_and_purges():
    assert _offers(QueryLog) == {"record", "feedback", "recent", "purge", "conversation",
                                 "reopen"}


def test_sources_open_a_cited_document_its_original_and_its_groups():
    assert _offers(Sources) == {"document", "original", "document_groups"}


def test_corrections_are_submitted_and_reviewed():
    assert _offers(Corrections) == {"submit", "to_review", "approve", "reject"}


def test_entities_are_found_by_name_and_shown_as_a_card():
    assert _offers(Entities) == {"find", "card"}


def test_gaps_give_the_report():
    assert _offers(Gaps) == {"report"}


def test_operations_tell_the_installations_state():
    assert _offers(Operations) == {
        "documents", "failures", "status", "index_model", "configured_model",
        "query_embedder", "replica_status", "follow_index_changes"}


def test_nothing_of_the_inside_shows_through_a_service():
    """No public method takes or returns a pool, a connection or the engine's parts."""
    for service in SERVICES.values():
        for name in _offers(service):
            member = getattr(service, name)
            if isinstance(member, property):
                member = member.fget
            for annotation in inspect.get_annotations(member).values():
                assert not any(inside in str(annotation) for inside in INSIDES), (
                    service.__name__, name, annotation)
    annotation = inspect.get_annotations(open_knowledge_base)["return"]
    assert annotation == "KnowledgeBase"


def test_the_doors_are_held_to_the_face_and_run_no_sql_by_contracts():
    """Every module of the engine but its package root is protected: only the engine itself
    and kb_eval (whose fitters tune the engine's insides) import one, so a door (the `kb`
    command, the query service, Dagster's definitions) can reach nothing but the face, and a
    new module of the engine is protected as it is added. No door imports the named queries
    or the raw connection; the Dagster resource that lends connections is the one exception."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = {c["name"]: c for c in config["tool"]["importlinter"]["contracts"]}
    face = contracts["Doors use the engine through its face"]
    assert face["type"] == "protected"
    assert face["protected_modules"] == ["kb_search.*"]
    assert sorted(face["allowed_importers"]) == ["kb_eval", "kb_search"]
    assert "ignore_imports" not in face
    no_sql = contracts["Doors run no SQL of their own"]
    assert no_sql["type"] == "forbidden"
    assert sorted(no_sql["source_modules"]) == ["kb_cli", "kb_pipeline.defs", "query_service"]
    assert sorted(no_sql["forbidden_modules"]) == ["kb_core.database", "kb_core.queries"]
    assert no_sql["ignore_imports"] == ["kb_pipeline.defs.resources -> kb_core.database"]
