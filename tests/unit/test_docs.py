"""The documentation holds together: README stays short, the generated pages are what their
generators print, every relative link resolves inside the repository, the site fetches nothing
from another host, and code that cites a page cites one that exists (issue 41)."""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from kb_cli.reference import PAGES
from kb_core.settings import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
MARKDOWN = [README, *sorted(DOCS.glob("*.md")), *sorted((REPO_ROOT / "samples").glob("*.md"))]
# Inline links and images, `[text](target)`; code spans are removed first, so an example of the
# syntax inside backticks is not taken for a link.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HTML_SOURCE = re.compile(r"""<img [^>]*src="([^"]+)\"""")
CODE_SPAN = re.compile(r"`[^`\n]*`")
PRIVATE_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0", ".local", ".internal")
# Files whose comments and strings may cite documentation: everything that ships but the docs.
CODE_SUFFIXES = {".py", ".sql", ".yml", ".yaml", ".toml", ".html", ".js", ".css", ".sh"}
CODE_NAMES = {"Makefile", "Dockerfile", "run"}
# A citation such as (docs/deployment.md, "Read replicas"); not a path inside a longer path or
# a code span, which is test data (file:///docs/a.md, `docs/x.md`).
CITED_PAGE = re.compile(r"(?<![/`\w])((?:docs/)?[A-Za-z_-]+\.md)\b(?:, \"([^\"]+)\")?")


def _width(line: str) -> int:
    """Terminal columns: a wide (CJK) character takes two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def _outside_code_blocks(text: str) -> str:
    """`text` without fenced code blocks and code spans, where link syntax is only an example."""
    kept, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(CODE_SPAN.sub("", line))
    return "\n".join(kept)


def _anchor(heading: str) -> str:
    """The id Python-Markdown's toc extension gives a heading (its default slugify)."""
    text = CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text)
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _headings(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    lines = [line for line in _outside_code_blocks(text).splitlines() if line.startswith("#")]
    raw = [line for line in text.splitlines() if line.startswith("#")]
    return {line.lstrip("#").strip() for line in raw if line in lines or "`" in line}


def _code_files() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True,
                             text=True, check=True).stdout.splitlines()
    return [REPO_ROOT / name for name in tracked
            if (Path(name).suffix in CODE_SUFFIXES or Path(name).name in CODE_NAMES)
            and not name.startswith("docs/") and (REPO_ROOT / name).is_file()]


def test_readme_is_short_and_narrow():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    wide = [(number, _width(line)) for number, line in enumerate(lines, 1) if _width(line) > 100]
    assert wide == []


@pytest.mark.parametrize("path", list(PAGES), ids=lambda p: p.name)
def test_a_generated_page_is_what_its_generator_prints(path):
    assert path.read_text(encoding="utf-8") == PAGES[path](), (
        f"{path.relative_to(REPO_ROOT)} is stale: run `python -m kb_cli.reference`")


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_link_resolves_inside_the_repository_or_to_a_public_site(page):
    text = _outside_code_blocks(page.read_text(encoding="utf-8"))
    targets = LINK.findall(text) + HTML_SOURCE.findall(text)
    broken = []
    for target in targets:
        if target.startswith(("http://", "https://")):
            if any(host in target.split("/")[2] for host in PRIVATE_HOSTS):
                broken.append(f"{target}: not a public site")
            continue
        if target.startswith("mailto:"):
            continue
        file, _, anchor = target.partition("#")
        resolved = (page.parent / file).resolve() if file else page
        if not resolved.is_relative_to(REPO_ROOT) or not resolved.exists():
            broken.append(f"{target}: no such file in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in {
                _anchor(h) for h in _headings(resolved)}:
            broken.append(f"{target}: no such heading")
    assert broken == []


def test_code_cites_documentation_that_exists():
    wrong = []
    for path in _code_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for page, heading in CITED_PAGE.findall(line):
                if "/" not in page and page not in {"README.md"}:
                    continue  # a bare name such as a.md is a file a test writes, not a citation
                cited = REPO_ROOT / page
                where = f"{path.relative_to(REPO_ROOT)}:{number}"
                if not cited.exists():
                    wrong.append(f"{where}: {page} does not exist")
                elif heading and heading not in _headings(cited):
                    wrong.append(f"{where}: {page} has no heading {heading!r}")
    assert wrong == []


def test_code_cites_no_design_document_outside_the_repository():
    citing = [str(path.relative_to(REPO_ROOT)) for path in _code_files()
              if re.search(r"\bDESIGN\.md\b|README, \"", path.read_text(encoding="utf-8"))]
    assert citing == []


def test_the_site_builds_strictly_and_fetches_nothing_from_another_host(tmp_path):
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                            "--site-dir", str(tmp_path)], cwd=REPO_ROOT,
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    fetched = re.compile(r"""<(?:script|img|iframe)[^>]+src="(https?:)?//|"""
                         r"""<link[^>]+href="(https?:)?//[^"]+"[^>]*rel="(?:stylesheet|preload|preconnect)"|"""
                         r"""<link[^>]+rel="(?:stylesheet|preload|preconnect)"[^>]+href="(https?:)?//|"""
                         r"""@import\s+url\(["']?https?:""")
    offenders = [str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*")
                 if path.suffix in {".html", ".css"}
                 and fetched.search(path.read_text(encoding="utf-8", errors="replace"))]
    assert offenders == []
