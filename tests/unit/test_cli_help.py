"""`kb --help` of every subcommand ends with examples a person can run (issue 18)."""

from __future__ import annotations

import argparse
import importlib
import inspect

from kb_cli.main import build_parser


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _subcommands(sub, (*path, name))


def test_every_subcommand_help_ends_with_examples_of_itself():
    commands = dict(_subcommands(build_parser()))
    assert {("ingest",), ("status",), ("generation", "rebuild"), ("token", "create")} <= set(
        commands)
    for path, parser in commands.items():
        text = parser.format_help().rstrip()
        head, _, examples = text.rpartition("\nexamples:\n")
        assert head, f"kb {' '.join(path)} --help has no examples"
        lines = [line.strip() for line in examples.splitlines()]
        assert 1 <= len(lines) <= 2, (path, lines)
        assert all(f"kb {' '.join(path)}" in line for line in lines), (path, lines)


def test_every_subcommand_is_run_by_a_function_that_exists():
    """Commands name their function as "module:function" under kb_cli, imported only when
    the command runs (so `kb --help` loads neither Dagster nor Litestar): each name resolves."""
    for path, parser in _subcommands(build_parser()):
        handler = parser.get_default("handler")
        if handler is None:  # a group: its subcommands are run
            continue
        module, function = handler.split(":")
        run = getattr(importlib.import_module(f"kb_cli.{module}"), function, None)
        assert callable(run), (path, handler)
        assert list(inspect.signature(run).parameters) == ["args", "settings"], (path, handler)
