"""`kb generation list|rebuild|discard`: the index generations. The folder sensor rebuilds by
itself after a pipeline change; `rebuild` does the same now, in this process, and `discard`
drops a generation that was refused (or is no longer wanted)."""

from __future__ import annotations

import argparse
import sys

import msgspec

from kb_cli.progress_display import live_display
from kb_core.generations import GenerationError, discard_generation_at, list_generations_at
from kb_core.migrations import prepare_database
from kb_core.settings import Settings
from kb_pipeline.dagster_home import dagster_instance
from kb_pipeline.in_process import rebuild_in_process
from kb_pipeline.runs import generation_running

__all__ = ["run"]


def run(args: argparse.Namespace, settings: Settings) -> int:
    settings = prepare_database(settings)
    if args.action == "rebuild":
        return _rebuild(args, settings)
    if args.action == "discard":
        if _rebuild_running(settings, args.id):
            print(f"generation {args.id} is still being built or evaluated", file=sys.stderr)
            return 1
        try:
            discard_generation_at(settings.database_url, args.id,
                                  "discarded with `kb generation discard`")
        except GenerationError as exc:
            print(exc, file=sys.stderr)
            return 1
    _show(args, [g.as_json() for g in list_generations_at(settings.database_url)])
    return 0


def _rebuild_running(settings: Settings, generation_id: int) -> bool:
    with dagster_instance(settings) as instance:
        return generation_running(instance, generation_id)


def _rebuild(args: argparse.Namespace, settings: Settings) -> int:
    with dagster_instance(settings) as instance, live_display(args):
        gen = rebuild_in_process(settings, instance)
    _show(args, [gen.as_json()])
    return 0 if gen.state == "live" else 1


def _show(args: argparse.Namespace, generations: list[dict]) -> None:
    if args.json:
        sys.stdout.write(msgspec.json.encode({"generations": generations}).decode() + "\n")
        return
    for g in generations:
        figures = g["evaluation"] or {}
        recall = figures.get("hybrid_recall_at_5")
        live = figures.get("live_hybrid_recall_at_5")
        print(f"{g['id']}\t{g['state']}\t{g['created_at']}\t"
              f"R@5 {'-' if recall is None else f'{recall:.4f}'}"
              f"{'' if live is None else f' (live {live:.4f})'}\t{g['note'] or ''}\t"
              f"{g['pipeline_version'] or '(not recorded)'}")
