"""Inside the engine, the evaluation and the pipeline's stages, each module's name is its own
(docs/architecture.md, "Layers and packages"): a name in a traceback, a log line or a review
says which module it is. The doors are named for the command or route they serve, and
Dagster's domains each hold its `assets.py`, `jobs.py` and `sensors.py`, so they are not
counted."""

from __future__ import annotations

from collections import defaultdict

from kb_core.settings import REPO_ROOT

PACKAGES = ("kb_core", "kb_search", "kb_eval", "kb_pipeline")
DOORS = (REPO_ROOT / "kb_pipeline" / "defs",)
SHARED = {"__init__.py", "__main__.py"}


def test_no_two_modules_of_the_engine_share_a_name():
    paths = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if path.name not in SHARED and not any(door in path.parents for door in DOORS):
                paths[path.name].append(str(path.relative_to(REPO_ROOT)))
    assert {name: found for name, found in paths.items() if len(found) > 1} == {}
