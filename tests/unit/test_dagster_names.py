"""The names an installation's Dagster history hangs on stay as they are (issue 42): asset keys,
asset checks, jobs, ops, sensors, partitions, pools, groups, resources and loggers of the code
location workspace.yaml loads. A run, a materialization, a check result and a sensor's cursor
are stored under these names, so renaming one orphans its history; moving a definition to
another module must change none of them."""

from __future__ import annotations

import importlib
import subprocess
import sys

import dagster as dg
import pytest
import yaml

from kb_core.settings import REPO_ROOT

IMPLICIT_JOB = "__ASSET_JOB"  # Dagster's own job over every asset, named by Dagster

# asset: (group, partitions, the assets it depends on)
ASSETS = {
    "raw_documents": ("ingestion", "documents", set()),
    "parsed_documents": ("ingestion", "documents", {"raw_documents"}),
    "chunks": ("ingestion", "documents", {"parsed_documents"}),
    "chunk_embeddings": ("ingestion", "documents", {"chunks"}),
    "entity_graph": ("ingestion", "documents", {"chunks"}),
    "search_index": ("ingestion", "documents", {"chunk_embeddings", "entity_graph"}),
    "scanned_pages": ("scans", "documents", set()),
    "retrieval_evaluation": ("evaluation", None, {"search_index", "published_generation"}),
    "generation_search_indexes": ("generations", "generations", set()),
    "generation_evaluation": ("generations", "generations", {"generation_search_indexes"}),
    "published_generation": ("generations", "generations", {"generation_evaluation"}),
    "learned_facts": ("corrections", None, set()),
    "knowledge_gaps": ("knowledge_gaps", None, set()),
}
# (asset, check): blocking
CHECKS = {
    ("search_index", "chunks_have_valid_embeddings"): True,
    ("search_index", "documents_have_whole_chunk_sets"): True,
    ("search_index", "entity_graph_is_whole"): True,
    ("search_index", "tables_are_whole"): True,
    ("search_index", "keyword_statistics_match_chunks"): True,
    ("search_index", "no_orphan_documents"): True,
    ("search_index", "documents_have_access_rules"): False,
    ("search_index", "no_open_ingestion_failures"): False,
    ("retrieval_evaluation", "hybrid_recall_at_5_above_floor"): True,
    ("retrieval_evaluation", "answers_cite_expected_source"): False,
    ("retrieval_evaluation", "not_found_precision_above_floor"): False,
    ("retrieval_evaluation", "not_found_recall_above_floor"): False,
    ("retrieval_evaluation", "answer_numbers_match_sources"): False,
    ("retrieval_evaluation", "answers_cite_only_permitted_documents"): False,
    ("generation_search_indexes", "generation_index_is_sound"): True,
    ("generation_evaluation", "generation_recall_at_5_holds"): True,
    ("generation_evaluation", "generation_covers_live_documents"): True,
}
INDEX_CHECK_OPS = {
    "search_index_chunks_have_valid_embeddings",
    "search_index_documents_have_whole_chunk_sets",
    "search_index_entity_graph_is_whole",
    "search_index_tables_are_whole",
    "search_index_keyword_statistics_match_chunks",
    "search_index_no_orphan_documents",
    "search_index_documents_have_access_rules",
    "search_index_no_open_ingestion_failures",
}
# job: (partitions, its ops)
JOBS = {
    "ingest_documents": ("documents", {
        "raw_documents", "parsed_documents", "chunks", "chunk_embeddings", "entity_graph",
        "search_index", *INDEX_CHECK_OPS}),
    "evaluate_generation": ("generations", {
        "generation_search_indexes", "generation_evaluation", "published_generation"}),
    "read_scans": ("documents", {"scanned_pages"}),
    "discard_generation": (None, {"discard_generation_op"}),
    "index_learned_facts": (None, {"learned_facts"}),
    "knowledge_gap_report": (None, {"knowledge_gaps"}),
}
OPS = {*(op for _, ops in JOBS.values() for op in ops), "retrieval_evaluation"}
# op: its concurrency pool; the other ops have none
POOLS = {"chunk_embeddings": "embedding", "scanned_pages": "ocr"}
# sensor: (what it targets: jobs, or assets for an automation sensor)
SENSORS = {
    "docs_folder_sensor": {"ingest_documents", "read_scans", "evaluate_generation"},
    "learned_facts_sensor": {"index_learned_facts"},
    "evaluation_automation": {"retrieval_evaluation"},
}
SCHEDULES = {"weekly_knowledge_gaps"}
RESOURCES = {"postgres", "folders", "ocr", "embedder", "providers", "answerer", "reranker",
             "graph_llm", "engine", "evaluation"}
LOGGERS = {"python_logging"}  # named in the run config of in-process runs


@pytest.fixture(scope="module")
def definitions() -> dg.Definitions:
    """The Definitions object of the code location, loaded as workspace.yaml has Dagster load
    it (the module's attribute, called when it is lazy), with a database URL set, as `kb up`
    sets one for its code server."""
    location = yaml.safe_load((REPO_ROOT / "workspace.yaml").read_text())
    [entry] = location["load_from"]
    pointer = entry["python_module"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KB_DATABASE_URL", "postgresql://nobody@localhost/unused")
        target = getattr(importlib.import_module(pointer["module_name"]), pointer["attribute"])
        loaded = target() if callable(target) else target
    assert isinstance(loaded, dg.Definitions)
    return loaded


@pytest.fixture(scope="module")
def repository(definitions: dg.Definitions) -> dg.RepositoryDefinition:
    return definitions.get_repository_def()


def test_asset_keys_groups_partitions_and_dependencies_keep_their_names(repository):
    graph = repository.asset_graph
    found = {}
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        partitions = node.partitions_def.name if node.partitions_def else None
        found[key.to_user_string()] = (
            node.group_name, partitions, {parent.to_user_string() for parent in node.parent_keys})
    assert found == ASSETS


def test_asset_checks_keep_their_names_and_blocking(repository):
    graph = repository.asset_graph
    found = {(key.asset_key.to_user_string(), key.name): graph.get_check_spec(key).blocking
             for key in graph.asset_check_keys}
    assert found == CHECKS


def test_jobs_keep_their_names_partitions_and_ops(repository):
    found = {}
    for job in repository.get_all_jobs():
        if job.name.startswith(IMPLICIT_JOB):
            continue
        partitions = job.partitions_def.name if job.partitions_def else None
        found[job.name] = (partitions, {node.name for node in job.all_node_defs})
    assert found == JOBS


def test_ops_and_concurrency_pools_keep_their_names(repository):
    ops = {node for job in repository.get_all_jobs() for node in job.all_node_defs}
    assert {op.name for op in ops} == OPS
    assert {op.name: op.pool for op in ops if op.pool} == POOLS


def test_sensors_keep_their_names_and_targets(repository):
    graph = repository.asset_graph
    found = {}
    for sensor in repository.sensor_defs:
        if isinstance(sensor, dg.AutomationConditionSensorDefinition):
            found[sensor.name] = {key.to_user_string()
                                  for key in sensor.asset_selection.resolve(graph)}
        else:
            found[sensor.name] = {target.job_name for target in sensor.targets}
        assert sensor.default_status == dg.DefaultSensorStatus.RUNNING, sensor.name
    assert found == SENSORS
    assert {schedule.name for schedule in repository.schedule_defs} == SCHEDULES


def test_resources_and_loggers_keep_their_names(definitions, repository):
    assert set(repository.get_top_level_resources()) == RESOURCES
    assert set(definitions.loggers or {}) == LOGGERS


def test_kb_help_loads_no_dagster():
    # In a fresh interpreter: this one has loaded Dagster already.
    script = ("import sys\nfrom kb_cli.main import main\n"
              "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
              "print(sorted({m.split('.')[0] for m in sys.modules} & {'dagster', 'kb_pipeline',"
              " 'kb_search', 'query_service'}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO_ROOT, check=True)
    assert done.stdout.splitlines()[-1] == "[]"
