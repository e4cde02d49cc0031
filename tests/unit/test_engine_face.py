"""The engine's one face (issue 42): what `kb_search` offers the doors, listed, so that a change
to it is a deliberate one. It shows no pool, connection, searcher or asker: a door that needed
one would be reaching inside the engine. The doors' imports are held by an import-linter
contract in pyproject.toml ("Doors use the engine through its face")."""

from __future__ import annotations

import inspect
import tomllib

import kb_search
from kb_core.settings import REPO_ROOT
from kb_search import KnowledgeBase, open_knowledge_base

PUBLIC_NAMES = {
    # the face and how it is opened
    "KnowledgeBase", "open_knowledge_base",
    # what its results are made of
    "AnswerDelta", "AnswerEvent", "AnswerPart", "AskResult", "Assessment", "Citation",
    "CitationNumber", "Comparison", "Stage", "StagePart",
    "CorrectedPassage", "CorrectionForReview", "DocumentPassage", "DocumentView",
    "OfferedPassage", "OfferedPassages", "Original", "Ranks", "SearchHit", "SearchResult",
    "GapDocument", "GapQuestion", "GapReport", "GapTopic", "StaleDocument", "UncitedDocument",
    "EntityCard", "EntityDocument", "EntityLink", "EntityMatch", "EntityPassage",
    "EntityRelation", "RelationEvidence",
    # what it refuses with
    "ChangedOriginalError", "CorrectionError", "UnknownCorrectionError",
    # the contract's constants, the path-only view of a result, a passage fenced as quoted text
    "ASK_MODES", "AskMode", "MAX_PASSAGES", "MODES", "Mode", "NOT_FOUND", "public",
    "quoted_passage",
}

# method: its parameters after self
METHODS = {
    "search": ["caller", "question", "k", "mode"],
    "ask": ["caller", "question", "mode", "use_cache"],
    "ask_events": ["caller", "question", "mode", "use_cache"],
    "assess": ["caller", "question", "mode", "answer"],
    "feedback": ["caller", "query_id", "helpful", "comment"],
    "recent_questions": ["caller", "limit"],
    "purge_query_log": ["days"],
    "knowledge_gaps": ["reviewer", "days"],
    "find_entities": ["caller", "name"],
    "entity": ["caller", "entity_id"],
    "document": ["caller", "document_id", "chunk_id"],
    "original": ["caller", "document_id"],
    "submit_correction": ["caller", "name", "query_id", "correction", "chunk_ids"],
    "corrections_to_review": ["reviewer"],
    "approve_correction": ["reviewer", "name", "correction_id"],
    "reject_correction": ["reviewer", "name", "correction_id", "note"],
    "document_groups": ["source_uris"],
    "index_model": [],
    "query_embedder": ["index_model"],
    "replica_status": [],
    "follow_index_changes": [],
    "close": [],
}
PROPERTIES = {"configured_model"}

INSIDES = ("Pool", "Connection", "Searcher", "Asker", "ReadRouter", "psycopg")


def test_the_package_offers_the_face_and_its_public_types_only():
    assert set(kb_search.__all__) == PUBLIC_NAMES
    for name in PUBLIC_NAMES:
        assert hasattr(kb_search, name), name


def test_the_face_lists_its_use_cases():
    public = {name for name in dir(KnowledgeBase) if not name.startswith("_")}
    assert public == set(METHODS) | PROPERTIES
    for name, parameters in METHODS.items():
        signature = inspect.signature(getattr(KnowledgeBase, name))
        assert list(signature.parameters)[1:] == parameters, name
    assert list(inspect.signature(open_knowledge_base).parameters) == [
        "settings", "connections", "generation", "answers", "outage_ok"]


def test_nothing_of_the_inside_shows_through_the_face():
    """No public method takes or returns a pool, a connection or the engine's parts."""
    for name in METHODS:
        annotations = inspect.get_annotations(getattr(KnowledgeBase, name))
        for annotation in annotations.values():
            assert not any(inside in str(annotation) for inside in INSIDES), (name, annotation)
    annotation = inspect.get_annotations(open_knowledge_base)["return"]
    assert annotation == "KnowledgeBase"


def test_the_doors_are_held_to_the_face_by_a_contract():
    """Every module of the engine but its package root is protected: only the engine itself
    and kb_eval (whose fitters tune the engine's insides) import one, so a door (the `kb`
    command, the query service, Dagster's definitions) can reach nothing but the face, and a
    new module of the engine is protected as it is added."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = {c["name"]: c for c in config["tool"]["importlinter"]["contracts"]}
    face = contracts["Doors use the engine through its face"]
    assert face["type"] == "protected"
    assert face["protected_modules"] == ["kb_search.*"]
    assert sorted(face["allowed_importers"]) == ["kb_eval", "kb_search"]
    assert "ignore_imports" not in face
