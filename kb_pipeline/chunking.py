"""Split a parsed document into heading-aware, token-bounded passages for embedding and search.

Structure comes first: each heading opens a section, and a chunk never spans two sections, so
every passage knows its heading path (「第3章 旅費 > 第12条（宿泊費）」). Within a section, whole
paragraphs and tables are packed together; what does not fit is cut at sentence ends (never
inside 「」 or （） while a cut outside them fits), then by characters, and tables by rows under
their repeated header. Every size is measured with the caller's tokenizer on the exact text that
will be embedded, so `count_tokens(chunk.text) <= max_tokens` holds for every chunk.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from kb_pipeline.parsing.model import Block, ParsedDocument

__all__ = ["CHUNKER_VERSION", "Chunk", "chunk_document", "embedding_views"]

# Part of the pipeline version: bump it whenever the same document would chunk differently.
CHUNKER_VERSION = "ja-structure-1"

CountTokens = Callable[[str], int]

_OPENERS = "「『（(【〔［[｛{〈《"
_CLOSERS = "」』）)】〕］]｝}〉》"
_ENDS = "。！？!?\n"
_MARKS = re.compile("[" + re.escape(_OPENERS + _CLOSERS + _ENDS) + "]")
# Characters that stay with the sentence end before them: 「…です。」 closes with its sentence.
_TRAILING = frozenset(_ENDS + _CLOSERS + "．…‥\"'”’")
_SOFT_BREAK = re.compile(r"[\s、，,；;：:・]+")
# No real tokenizer averages more characters per token; longer text is not even counted.
_MAX_CHARS_PER_TOKEN = 16


class Chunk(msgspec.Struct, frozen=True):
    """One passage: `content` is what a citation quotes, `text` what is embedded and searched."""

    index: int
    heading: str
    location: str | None
    content: str
    text: str
    token_count: int


def chunk_document(
    doc: ParsedDocument,
    count_tokens: CountTokens,
    max_tokens: int = 480,
    overlap_tokens: int = 64,
) -> list[Chunk]:
    """Return the document's passages in reading order, each within `max_tokens`.

    `text` is 「【title】heading path」, a line break, then `content`; `count_tokens(text)` is the
    chunk's `token_count`. Consecutive chunks of one section repeat about `overlap_tokens` of
    whole sentences from the end of the previous chunk.
    """
    if max_tokens <= count_tokens(""):
        raise ValueError(f"max_tokens={max_tokens} leaves no room for any text")
    if overlap_tokens < 0:
        raise ValueError(f"overlap_tokens must not be negative, got {overlap_tokens}")
    title = _one_line(doc.title)
    chunks: list[Chunk] = []
    for path, blocks in _sections(doc.blocks):
        line = f"【{title}】{path}" if title else path
        head, passages = _chunk_section(line, blocks, count_tokens, max_tokens, overlap_tokens)
        for content, location, tokens in passages:
            chunks.append(Chunk(
                index=len(chunks), heading=path, location=location, content=content,
                text=head + content, token_count=tokens,
            ))
    return chunks


def embedding_views(
    chunk: Chunk, count_tokens: CountTokens, max_tokens: int, overlap_tokens: int
) -> list[str]:
    """Return the texts `chunk` is embedded as: its whole `text` when it fits in `max_tokens`,
    else its head line followed by consecutive parts of its content that each fit.

    e5 was trained on passages of about a paragraph: one vector for a chunk of several topics
    stands for none of them well, so a long chunk is found by its best part instead. Parts are
    cut like chunks (sentence ends first) and overlap by about `overlap_tokens`.
    """
    if chunk.token_count <= max_tokens:
        return [chunk.text]
    line = chunk.text[: len(chunk.text) - len(chunk.content)].removesuffix("\n")
    budget = _section_budget(line, count_tokens, max_tokens)
    pieces = _block_pieces(Block("paragraph", chunk.content), budget)
    return [budget.head + content for content, _, _ in _pack(pieces, budget, overlap_tokens)]


@dataclass(frozen=True, slots=True)
class _Budget:
    """The token limit of chunks that all start with `head` (the 【title】heading line)."""

    count: CountTokens
    limit: int
    head: str
    head_tokens: int

    def measure(self, content: str) -> int:
        return self.count(self.head + content)

    def fits_alone(self, content: str) -> int | None:
        """Return the count of head + content if it fits, else None (long text is not counted)."""
        if len(content) > _MAX_CHARS_PER_TOKEN * self.limit:
            return None
        tokens = self.measure(content)
        return tokens if tokens <= self.limit else None

    def under(self, lead: str) -> _Budget:
        return _Budget(self.count, self.limit, self.head + lead, self.count(self.head + lead))


@dataclass(frozen=True, slots=True)
class _Piece:
    """A unit of packing: a paragraph, sentence, table part or cut, with the space before it."""

    text: str  # stripped; head + text alone fits the budget
    location: str | None
    tokens: int  # count(head + text) - head_tokens: what it adds to a chunk, near enough
    gap: str  # the whitespace separating it from the previous piece in the document
    sentences: bool  # whole sentences, so it may be repeated as overlap


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _sections(blocks: list[Block]) -> list[tuple[str, list[Block]]]:
    """Return (heading path, body blocks) for each section with text, in reading order."""
    sections: list[tuple[str, list[Block]]] = []
    stack: list[tuple[int, str]] = []
    body: list[Block] = []
    bare: Block | None = None  # the latest heading, while nothing is written under it

    def path() -> str:
        return " > ".join(text for _, text in stack)

    for block in blocks:
        if not block.text.strip():
            continue
        if block.kind != "heading":
            body.append(block)
            bare = None
            continue
        if body:
            sections.append((path(), body))
            body = []
        elif bare is not None and block.level <= bare.level:
            # A heading with no text and no subheadings (「第5条 削除」) is itself the passage.
            sections.append((path(), [Block("paragraph", bare.text, location=bare.location)]))
        while stack and stack[-1][0] >= block.level:
            stack.pop()
        stack.append((block.level, _one_line(block.text)))
        bare = block
    if body:
        sections.append((path(), body))
    elif bare is not None:
        sections.append((path(), [Block("paragraph", bare.text, location=bare.location)]))
    return sections


def _chunk_section(
    line: str, blocks: list[Block], count: CountTokens, limit: int, overlap_tokens: int
) -> tuple[str, list[tuple[str, str | None, int]]]:
    """Return the section's head (`line`, a line break) and (content, location, tokens) chunks."""
    head = f"{line}\n" if line else ""
    # Most sections (an article, a slide) fit whole: one count, and no planning at all.
    content = "\n".join(block.text.strip() for block in blocks)
    if len(content) <= _MAX_CHARS_PER_TOKEN * limit and (tokens := count(head + content)) <= limit:
        return head, [(content, blocks[0].location, tokens)]
    budget = _section_budget(line, count, limit)
    pieces = [piece for block in blocks for piece in _block_pieces(block, budget)]
    return budget.head, _pack(pieces, budget, overlap_tokens)


def _section_budget(line: str, count: CountTokens, limit: int) -> _Budget:
    """Return the budget of a section's chunks, shortening a head that would leave no room."""
    head = f"{line}\n" if line else ""
    budget = _Budget(count, limit, head, count(head))
    if budget.head_tokens <= limit // 2:
        return budget
    end, _ = _longest_fit(
        lambda end: count(line[:end] + "…\n"), 0, len(line), limit // 2, count("…\n"), limit // 2
    )
    head = line[:end] + "…\n"
    return _Budget(count, limit, head, count(head))


def _block_pieces(block: Block, budget: _Budget) -> list[_Piece]:
    """Return a block whole if it fits, else its sentences or table rows, cut to fit."""
    text = block.text.strip()
    tokens = budget.fits_alone(text)
    if tokens is not None:
        return [_Piece(text, block.location, tokens - budget.head_tokens, "\n",
                       sentences=block.kind != "table")]
    if block.kind == "table":
        return _table_pieces(text, block.location, budget)
    pieces: list[_Piece] = []
    for gap, sentence in _sentences(text, "\n", nested=True):
        tokens = budget.fits_alone(sentence)
        if tokens is not None:
            pieces.append(_Piece(sentence, block.location, tokens - budget.head_tokens, gap, True))
            continue
        # Brackets hold back a cut only while the whole bracketed sentence fits.
        for part_gap, part in _sentences(sentence, gap, nested=False):
            pieces.extend(_fitted_pieces(part, part_gap, block.location, budget, sentences=True))
    return pieces


def _table_pieces(text: str, location: str | None, budget: _Budget) -> list[_Piece]:
    """Split a table too large for one chunk into row groups, each led by its header row."""
    rows = [line.strip() for line in text.splitlines() if line.strip()]
    width = 2 if len(rows) > 2 and _is_rule(rows[1]) else 1
    header, body = "\n".join(rows[:width]), rows[width:]
    row_budget = budget.under(header + "\n") if body else budget
    if not body or row_budget.head_tokens > budget.limit // 2:
        # A header this large leaves no room to repeat it: the rows are cut like text.
        header, body, row_budget = "", rows, budget
    row_pieces = [
        piece for row in body
        for piece in _fitted_pieces(row, "\n", location, row_budget, sentences=False)
    ]
    lead = f"{header}\n" if header else ""
    return [
        _Piece(lead + content, location, tokens - budget.head_tokens, "\n", sentences=False)
        for content, _, tokens in _pack(row_pieces, row_budget, overlap_tokens=0)
    ]


def _is_rule(row: str) -> bool:
    """Whether a row is a Markdown table's |---|:---:| line, which belongs to the header."""
    return "-" in row and not set(row) - set("|-: \t")


def _sentences(text: str, gap: str, nested: bool) -> list[tuple[str, str]]:
    """Split text after each sentence end (。！？!? or a line break), keeping the end with it.

    Returns (whitespace before, sentence) pairs, `gap` being the whitespace before the first.
    With `nested`, nothing is cut inside brackets or quotes such as 「…」 and （…）.
    """
    pairs: list[tuple[str, str]] = []
    start = depth = 0
    for mark in _MARKS.finditer(text):
        i = mark.start()
        char = text[i]
        if i < start:
            continue
        if char in _OPENERS:
            depth += 1
            continue
        if char in _CLOSERS:
            depth = max(0, depth - 1)
            continue
        if (nested and depth) or (char in "!?" and _inside_word(text, i)):
            continue
        end = i + 1
        while end < len(text) and (text[end] in _TRAILING or text[end].isspace()):
            end += 1
        if end == len(text):
            break
        sentence = text[start:end].rstrip()
        pairs.append((gap, sentence))
        gap, start = text[start + len(sentence):end], end
    if start < len(text):
        pairs.append((gap, text[start:].rstrip()))
    return pairs


def _inside_word(text: str, i: int) -> bool:
    """Whether an ASCII ! or ? is part of a word or URL (「?id=3」) rather than a sentence end."""
    after = text[i + 1:i + 2]
    return after != "" and after.isascii() and (after.isalnum() or after in "=&/#%_-.")


def _fitted_pieces(
    text: str, gap: str, location: str | None, budget: _Budget, sentences: bool
) -> list[_Piece]:
    """Return text as one piece if it fits, else cut by characters into pieces that each fit."""
    tokens = budget.fits_alone(text)
    if tokens is not None:
        return [_Piece(text, location, tokens - budget.head_tokens, gap, sentences)]
    pieces: list[_Piece] = []
    start, guess = 0, 2 * (budget.limit - budget.head_tokens)
    while start < len(text):
        measure = _prefix_measure(budget, text, start)
        end, tokens = _longest_fit(
            measure, start, len(text), budget.limit, budget.head_tokens, guess
        )
        if end == start:
            raise ValueError(f"max_tokens={budget.limit} leaves no room for text after the heading")
        if end < len(text) and (cut := _gentle_cut(text, start, end)) != end:
            cut_tokens = measure(cut)
            if cut_tokens <= budget.limit:
                end, tokens = cut, cut_tokens
        piece = text[start:end].rstrip()
        pieces.append(_Piece(piece, location, tokens - budget.head_tokens, gap, sentences=False))
        guess, next_start = end - start, end
        while next_start < len(text) and text[next_start].isspace():
            next_start += 1
        gap, start = text[start + len(piece):next_start], next_start
    return pieces


def _prefix_measure(budget: _Budget, text: str, start: int) -> Callable[[int], int]:
    return lambda end: budget.measure(text[start:end].rstrip())


def _longest_fit(
    measure: Callable[[int], int], start: int, stop: int, limit: int, empty: int, guess: int
) -> tuple[int, int]:
    """Return a far end (start..stop) where measure(end) <= limit, with that count.

    Counting costs time in proportion to the text counted, so instead of bisecting over the whole
    remaining text, each guess is interpolated from the tokens per character seen so far: one to
    three counts per piece keep a 1 MB line linear. `empty` is the count with no text; the result
    stops within about 3 % of the limit. Returns (start, empty) when not one character fits.
    """
    good, good_tokens, bad = start, empty, stop + 1
    slack = max(1, (limit - empty) // 32)
    end = min(stop, start + max(1, guess))
    for attempt in range(128):
        tokens = measure(end)
        if tokens <= limit:
            good, good_tokens = end, tokens
            if end == stop or tokens >= limit - slack:
                break
        else:
            bad = end
        if bad - good <= 1:
            break
        if attempt >= 4:
            target = (good + bad) // 2
        elif tokens > empty:
            target = start + (end - start) * (limit - slack // 2 - empty) // (tokens - empty)
        else:
            target = start + 2 * (end - start)
        end = min(max(target, good + 1), bad - 1)
    return good, good_tokens


def _gentle_cut(text: str, start: int, end: int) -> int:
    """Move a cut back to just after a space or comma near it, and never into a character."""
    low = max(start + 1, end - (end - start) // 8)
    soft = None
    for soft in _SOFT_BREAK.finditer(text, low, end):  # noqa: B007 - the last match is wanted
        pass
    if soft is not None:
        return soft.end()
    cut = end
    while cut > low and _continues_character(text, cut):
        cut -= 1
    return end if _continues_character(text, cut) else cut


def _continues_character(text: str, i: int) -> bool:
    """Whether text[i] belongs to the character before it (combining mark, ZWJ sequence)."""
    char = text[i]
    return (
        unicodedata.category(char) in ("Mn", "Mc", "Me")
        or char == "\u200d"
        or text[i - 1] == "\u200d"
    )


def _pack(
    pieces: list[_Piece], budget: _Budget, overlap_tokens: int
) -> list[tuple[str, str | None, int]]:
    """Group consecutive pieces into (content, location, token count) chunks that fit.

    Pieces are added on their own counts; a join can save about a token, so only a near miss
    is counted exactly, and that count then replaces the estimate.
    """
    packed: list[tuple[str, str | None, int]] = []
    chunk: list[_Piece] = []
    carried = estimate = joins = 0
    for piece in pieces:
        if chunk:
            guess = estimate + max(piece.tokens, 1)
            if guess <= budget.limit:
                chunk.append(piece)
                estimate, joins = guess, joins + 1
                continue
            if guess <= budget.limit + joins + 1:
                tokens = budget.measure(_render([*chunk, piece]))
                if tokens <= budget.limit:
                    chunk.append(piece)
                    estimate, joins = tokens, 0
                    continue
            packed.extend(_emit(chunk, carried, budget))
            room = budget.limit - budget.head_tokens - piece.tokens
            carry = _overlap(chunk[carried:], budget, min(overlap_tokens, room))
        else:
            carry = []
        chunk, carried, joins = [*carry, piece], len(carry), len(carry)
        estimate = budget.head_tokens + sum(max(p.tokens, 1) for p in chunk)
    if chunk:
        packed.extend(_emit(chunk, carried, budget))
    return packed


def _emit(chunk: list[_Piece], carried: int, budget: _Budget) -> list[tuple[str, str | None, int]]:
    """Return the chunk, measured exactly; regrouped without overlap if the estimate was short."""
    if len(chunk) == 1:  # a piece alone was measured when it was made
        return [(chunk[0].text, chunk[0].location, budget.head_tokens + chunk[0].tokens)]
    content = _render(chunk)
    tokens = budget.measure(content)
    if tokens <= budget.limit:
        return [(content, chunk[0].location, tokens)]
    pieces, start = chunk[carried:], 0
    emitted: list[tuple[str, str | None, int]] = []
    while start < len(pieces):
        # Each piece fits alone, so the search over piece boundaries always moves on.
        end, tokens = _longest_fit(
            _pieces_measure(budget, pieces, start), start, len(pieces), budget.limit,
            budget.head_tokens, guess=len(pieces) // 2,
        )
        emitted.append((_render(pieces[start:end]), pieces[start].location, tokens))
        start = end
    return emitted


def _pieces_measure(budget: _Budget, pieces: list[_Piece], start: int) -> Callable[[int], int]:
    return lambda end: budget.measure(_render(pieces[start:end]))


def _overlap(previous: list[_Piece], budget: _Budget, room: int) -> list[_Piece]:
    """Return whole sentences from the end of `previous`, up to `room` tokens, to repeat."""
    carry: list[_Piece] = []
    for piece in reversed(previous):
        if not piece.sentences or room <= 0:
            break
        if piece.tokens <= room:
            carry.insert(0, piece)
            room -= max(piece.tokens, 1)
            continue
        for gap, sentence in reversed(_sentences(piece.text, piece.gap, nested=True)):
            tokens = budget.measure(sentence) - budget.head_tokens
            if tokens > room:
                break
            carry.insert(0, _Piece(sentence, piece.location, tokens, gap, sentences=True))
            room -= max(tokens, 1)
        break
    return carry


def _render(pieces: list[_Piece]) -> str:
    return pieces[0].text + "".join(piece.gap + piece.text for piece in pieces[1:])
