"""Keep answering when an LLM fails: the extractive answer (or the one the caller had ready, a
table's), labelled as a fallback in `answerer`.

For a streamed answer, what happens depends on when the provider fails:
- before its first delta: the extractive answer is streamed instead, and nothing else is;
- after some deltas: those cannot be taken back from the reader, so the stream goes on with a
  notice that generation failed (INTERRUPTED) and then the extractive answer. The final text is
  exactly what was streamed (partial text, notice, extractive answer), `found` is the extractive
  answer's, `cited` holds every [n] in the text, and `answerer` says "failed mid-stream", so
  verification still checks the partial text and nothing unfinished passes for a whole answer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import msgspec

from kb_search.answerers.answer import Answer, Answerer, Exchange, Passage, Tools, citations
from kb_search.answerers.extractive import ExtractiveAnswerer

__all__ = ["INTERRUPTED", "StreamedAnswer", "answer_with_fallback", "stream_with_fallback"]

INTERRUPTED = "\n\n（回答の生成が途中で失敗しました。以下は文書から抜き出した記載です。）\n"

Log = logging.Logger | logging.LoggerAdapter
_EXTRACTIVE = ExtractiveAnswerer()


def answer_with_fallback(
    answerer: Answerer, question: str, passages: list[Passage], log: Log,
    tools: Tools | None = None, instead: Answer | None = None,
    earlier: Sequence[Exchange] = (),
) -> Answer:
    """The answerer's answer; on any failure of it, `instead` (else the extractive answer),
    labelled so."""
    try:
        return answerer.answer(question, passages, tools, earlier)
    # Deliberately broad: a provider fails in ways no list anticipates (network, HTTP status,
    # SDK validation, a reply we cannot read), and the question must still be answered. The
    # failure is logged in full; only its type reaches the caller (a message may hold URLs).
    except Exception as exc:  # noqa: BLE001
        _log_failure(log, answerer, exc, "")
        fallback = instead or _EXTRACTIVE.answer(question, passages)
        return msgspec.structs.replace(fallback, answerer=_label(fallback, answerer, exc, ""))


def stream_with_fallback(
    answerer: Answerer, question: str, passages: list[Passage], log: Log,
    tools: Tools | None = None, instead: Answer | None = None,
    earlier: Sequence[Exchange] = (),
) -> StreamedAnswer:
    """A stream of text deltas that falls back to `instead` (else the extractive answer);
    `.result()` after it."""
    return StreamedAnswer(answerer, question, passages, log, tools, instead, earlier)


class StreamedAnswer:
    """Iterate once for the text deltas; then `result()` is the final Answer."""

    def __init__(
        self, answerer: Answerer, question: str, passages: list[Passage], log: Log,
        tools: Tools | None = None, instead: Answer | None = None,
        earlier: Sequence[Exchange] = (),
    ) -> None:
        self._answerer = answerer
        self._earlier = earlier
        self._question = question
        self._passages = passages
        self._log = log
        self._tools = tools
        self._instead = instead
        self._started = False
        self._result: Answer | None = None

    def __iter__(self) -> Iterator[str]:
        if self._started:
            raise RuntimeError("a StreamedAnswer can be iterated only once")
        self._started = True
        return self._deltas()

    def result(self) -> Answer:
        """The final Answer; only once the deltas have been iterated to the end."""
        if self._result is None:
            raise RuntimeError("the answer is not finished: iterate over all its deltas first")
        return self._result

    def _deltas(self) -> Iterator[str]:
        streamed: list[str] = []
        deltas: Iterator[str] | None = None
        try:
            deltas = iter(self._answerer.stream(self._question, self._passages, self._tools,
                                                self._earlier))
            for delta in deltas:
                streamed.append(delta)
                yield delta
        except Exception as exc:  # noqa: BLE001 - as in answer_with_fallback
            yield from self._fall_back(streamed, exc)
            return
        finally:
            close = getattr(deltas, "close", None)  # a generator's; other iterators may lack it
            if close is not None:
                close()  # release the provider's connection when the reader stops early
        self._result = self._answerer.finish("".join(streamed))

    def _fall_back(self, streamed: list[str], exc: Exception) -> Iterator[str]:
        when = " mid-stream" if streamed else ""
        _log_failure(self._log, self._answerer, exc, when)
        fallback = self._instead or _EXTRACTIVE.answer(self._question, self._passages)
        label = _label(fallback, self._answerer, exc, when)
        if not streamed:
            yield fallback.text
            self._result = msgspec.structs.replace(fallback, answerer=label)
            return
        yield INTERRUPTED
        yield fallback.text
        text = "".join(streamed) + INTERRUPTED + fallback.text
        self._result = Answer(text=text, found=fallback.found, cited=citations(text),
                              answerer=label)


def _label(fallback: Answer, answerer: Answerer, exc: Exception, when: str) -> str:
    return f"{fallback.answerer} (fallback: {answerer.name} failed{when}: {type(exc).__name__})"


def _log_failure(log: Log, answerer: Answerer, exc: Exception, when: str) -> None:
    log.warning(
        "answerer %s failed%s (%s: %s); fallback answer used",
        answerer.name, when, type(exc).__name__, exc,
    )
