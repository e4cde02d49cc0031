"""`kb generation list|rebuild|discard`: the index generations. The folder sensor rebuilds by
itself after a pipeline change; `rebuild` does the same now, in this process, and `discard`
drops a generation that was refused (or is no longer wanted)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import msgspec

from kb_core.settings import Settings

__all__ = ["add_generation_parser", "cmd_generation"]


def add_generation_parser(sub: argparse._SubParsersAction,
                          func: Callable[[argparse.Namespace, Settings], int]) -> None:
    """Add `generation list|rebuild|discard` to the `kb` subcommands, dispatched to `func`."""
    gen = sub.add_parser("generation", help="index generations: list, rebuild, discard")
    actions = gen.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="every generation with its state and gate figures")
    rebuild = actions.add_parser(
        "rebuild", help="rebuild every document into a new generation, evaluate it, and "
                        "publish it if its gates pass")
    discard = actions.add_parser("discard", help="drop a generation that is not live")
    discard.add_argument("id", type=int)
    for parser in (listing, rebuild, discard):
        parser.add_argument("--json", action="store_true")
    gen.set_defaults(func=func)


def cmd_generation(args: argparse.Namespace, settings: Settings, url: str) -> int:
    """Run `kb generation ACTION` against the migrated database at `url`."""
    from kb_core.database import connect
    from kb_core.generations import GenerationError, discard_generation, list_generations

    if args.action == "rebuild":
        return _rebuild(args, settings, url)
    with connect(url, autocommit=True) as conn:
        if args.action == "discard":
            if _rebuild_running(args.id):
                print(f"generation {args.id} is still being built or evaluated",
                      file=sys.stderr)
                return 1
            try:
                discard_generation(conn, args.id, "discarded with `kb generation discard`")
            except GenerationError as exc:
                print(exc, file=sys.stderr)
                return 1
        generations = list_generations(conn)
    _show(args, [g.as_json() for g in generations])
    return 0


def _rebuild_running(generation_id: int) -> bool:
    import dagster as dg

    from kb_pipeline.generations import generation_running

    with dg.DagsterInstance.get() as instance:
        return generation_running(instance, generation_id)


def _rebuild(args: argparse.Namespace, settings: Settings, url: str) -> int:
    import dagster as dg

    from kb_pipeline.definitions import defs
    from kb_pipeline.generations import rebuild_in_process

    with dg.DagsterInstance.get() as instance:
        gen = rebuild_in_process(settings, url, instance, defs)
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
