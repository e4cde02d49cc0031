"""The documentation's generated pages: the command-line reference, from the `kb` parser itself,
and the configuration table, from `kb_core/settings.py`. Run as
`python -m kb_cli.reference` to rewrite them, or with `--check` to fail when a committed page
differs (tests/unit/test_docs.py does the same), so neither page can drift from the code.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Iterator

from kb_cli.main import build_parser
from kb_core.settings import REPO_ROOT, markdown_table

__all__ = ["PAGES", "cli_page", "configuration_page", "main"]

# The help is wrapped at a fixed width, not the terminal's, so the page is the same wherever it
# is generated.
HELP_WIDTH = 96

CLI_HEAD = """\
# Command-line reference

Every `kb` command with its `--help`, generated from the parser (`python -m kb_cli.reference`;
a test fails when this page differs from what it prints). How the commands fit together:
[Getting started](getting-started.md#shell-the-kb-commands).

A command prints its result on stdout (exactly one JSON object with `--json`) and only warnings
and errors on stderr; its log lines go to `$KB_HOME/logs/kb.log` (`kb -v …` shows them on stderr
as well).
"""

CONFIGURATION_HEAD = """\
# Configuration

Every variable is declared once, with its default and meaning, in `kb_core/settings.py`, and
read when a command or a run starts, never at import. This page is generated from that module
(`python -m kb_cli.reference`; a test fails when it differs). `kb up` hands its Dagster
webserver, daemon and query service an explicit environment with what it resolved (the
database URL, `KB_HOME`, the watched folders, the embedder).

What changing the embedder does to the index:
[the pipeline](pipeline.md#changing-the-embedding-model). Sign-in variables in context:
[the employee page](employee-page.md). Replicas and embedding servers:
[deployment](deployment.md).

"""


Command = tuple[tuple[str, ...], argparse.ArgumentParser]


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Command]:
    """Every parser under `parser`, depth first, with its command path."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def _help(parser: argparse.ArgumentParser) -> str:
    parser.formatter_class = functools.partial(parser.formatter_class, width=HELP_WIDTH)
    return parser.format_help().rstrip()


def cli_page() -> str:
    """The command-line reference page: one section per command, its `--help` verbatim."""
    sections = [CLI_HEAD]
    for path, parser in _commands(build_parser()):
        title = " ".join(("kb", *path))
        sections.append(f"## `{title}`\n\n```text\n{_help(parser)}\n```\n")
    return "\n".join(sections)


def configuration_page() -> str:
    """The configuration page: the settings module's table under a short introduction."""
    return CONFIGURATION_HEAD + markdown_table() + "\n"


PAGES = {
    REPO_ROOT / "docs" / "cli.md": cli_page,
    REPO_ROOT / "docs" / "configuration.md": configuration_page,
}


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (sys.argv[1:] if argv is None else argv)
    stale = []
    for path, render in PAGES.items():
        text = render()
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            stale.append(path)
            if not check:
                path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{'differs' if check else 'written'}: {path.relative_to(REPO_ROOT)}",
              file=sys.stderr)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
