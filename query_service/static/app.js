// The employee page: asks through POST /v1/ask with stream: true, read with fetch (the
// question never travels in a URL, which would land in logs), and shows the answer with its
// citations. Untrusted text (answers, passages, paths) only ever enters the page as text.
//
// A question that asks several things is answered part by part: `stage` events come first
// (its plan, each part's search, then the writing), and the answer's text gives each part a
// block under 【label】, shown as a small heading.
//
// Citation numbers are the answer's: [1], [2], ... in the order it first cites each passage.
// The stream's `citations` event offers the passages under their own `passage` numbers; a
// `delta` names in `cited` each [n] its text uses for the first time and the passage it stands
// for, and its card appears then; `done` carries the citations with their quotes, and is what
// the page finally shows.
//
// The page is a conversation: each question after the first is sent with `follows`, the
// query_id of the last answer, and the turns before it stay above it. The conversation is the
// server's (the query log's chain of answers): the page keeps only its last query_id, in the
// URL (?c=), nothing in the browser's storage, so a reload reopens it
// (GET /v1/conversations/{query_id}), as a recent question does.
"use strict";

const csrf = document.querySelector('meta[name="csrf-token"]').content;
const $ = (id) => document.getElementById(id);
const GAP = "…"; // between parts of a quote that are apart in the passage
// The turn being asked or shown last: {key: its number on the page, queryId, result: the
// answer as `done` or a reopening gave it, offered: Map passage -> offered passage, cited: Map
// n -> citation shown, parts: the plan's parts, when the question is answered in several}
let current = null;
let tip = null; // the query_id of the conversation's last answer: what the next one follows
let drawn = 0; // turns drawn so far: each turn's citation cards get ids of their own
const QUERY_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const UNVERIFIED = "この回答の一部は出典で確認できませんでした。出典を必ず確認してください。";
// The page's own blocks as they are before any answer: an earlier turn shows copies of them.
const PRISTINE = {};

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-") || key.startsWith("aria-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

async function api(path, options = {}) {
  const headers = { "X-CSRF-Token": csrf, ...(options.headers || {}) };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    ...options, headers, credentials: "same-origin",
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  if (response.status === 401) {
    status("セッションの有効期限が切れました。もう一度サインインしてください。", true);
    setTimeout(() => { window.location.href = "/"; }, 1500);
    throw new Error("unauthorized");
  }
  return response;
}

function status(text, isError = false) {
  const node = $("status");
  // The line is live: the same words set again would be read out again.
  if (node.textContent === text && node.classList.contains("error") === isError) return;
  node.textContent = text;
  node.classList.toggle("error", isError);
}

// Server-Sent Events from a fetch body: blocks separated by a blank line, each with an
// `event:` line and `data:` lines.
async function* serverEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer = (buffer + decoder.decode(value, { stream: true })).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

// A link to citation card n of `turn`, once the card is there.
function refLink(n, turn = current) {
  return turn && turn.cited.has(n)
    ? el("a", { href: `#cite-${turn.key}-${n}`, class: "ref", textContent: `[${n}]` })
    : `[${n}]`;
}

// Text with each [n] a link to its citation card, and each entity the answer names a link to
// its entity card.
function withRefs(text, turn = current) {
  const nodes = [];
  let last = 0;
  for (const match of text.matchAll(/\[(\d+)\]/g)) {
    nodes.push(...withEntities(text.slice(last, match.index), turn),
      refLink(Number(match[1]), turn));
    last = match.index + match[0].length;
  }
  nodes.push(...withEntities(text.slice(last), turn));
  return nodes;
}

// The entities an answer names that the employee's documents name too (the answer's
// `entities`), longest name first so that 湖西品質保証課 is not cut at 品質保証課.
function entityPattern(entities) {
  const names = [...new Set(entities.map((e) => e.name))].sort((a, b) => b.length - a.length);
  const escaped = names.map((n) => n.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  return names.length ? new RegExp(escaped.join("|"), "gi") : null;
}

function withEntities(text, turn) {
  if (!turn || !turn.entityPattern) return [text];
  const nodes = [];
  let last = 0;
  for (const match of text.matchAll(turn.entityPattern)) {
    const entity = turn.entities.get(match[0].toLowerCase());
    nodes.push(text.slice(last, match.index), entityLink(entity, match[0]));
    last = match.index + match[0].length;
  }
  nodes.push(text.slice(last));
  return nodes;
}

function entityLink(entity, text) {
  const link = el("a", {
    href: `/v1/entities/${encodeURIComponent(entity.id)}`, class: "entity", textContent: text,
  });
  link.addEventListener("click", (event) => {
    event.preventDefault();
    openEntity(entity.id);
  });
  return link;
}

// Names of entity kinds as the card shows them.
const ENTITY_KINDS = {
  code: "番号・型番", document: "文書", article: "条文", unit: "部署・拠点", role: "役職",
  thing: "その他",
};
// llm: a relation the LLM extractor (KB_GRAPH_LLM) read in the passage.
const REFERENCE_KINDS = { reference: "参照", row: "同じ表の行", llm: "AIによる抽出" };
const SHOWN_PASSAGES = 4; // of each document on a card; the document's viewer shows the rest

// An entity's card: the documents whose passages name it, each passage opening the viewer,
// and what they name it with, each opening that entity's card.
async function openEntity(entityId) {
  const response = await api(`/v1/entities/${encodeURIComponent(entityId)}`);
  if (!response.ok) {
    status("この項目の記載は見つかりません（閲覧できる文書にありません）。", true);
    return;
  }
  const card = await response.json();
  $("entity-title").textContent = card.name;
  $("entity-meta").textContent =
    `${ENTITY_KINDS[card.kind] || card.kind} ・ ${card.documents.length}件の文書の` +
    `${card.passages}か所に記載`;
  $("entity-documents").replaceChildren(...card.documents.map((d) =>
    el("li", {},
      el("strong", { textContent: d.title }),
      el("div", { class: "path", textContent: d.path }),
      el("ul", { class: "entity-passages" },
        ...d.passages.slice(0, SHOWN_PASSAGES).map((p) =>
          el("li", {}, passageLink(d.document_id, p.chunk_id, whereIn(p) || "冒頭"),
            p.description ? el("div", { class: "meta", textContent: p.description }) : null)),
        d.passages.length > SHOWN_PASSAGES
          ? el("li", { class: "meta",
              textContent: `ほか${d.passages.length - SHOWN_PASSAGES}か所` })
          : null))));
  $("entity-relations-title").hidden = card.relations.length === 0;
  $("entity-relations").replaceChildren(...card.relations.map((r) => {
    const how = r.references.map((k) => REFERENCE_KINDS[k] || k).join("・");
    const evidence = r.evidence[0];
    return el("li", {},
      entityLink(r, r.name),
      el("span", { class: "meta",
        textContent: ` ${ENTITY_KINDS[r.kind] || r.kind} ・ ${r.passages}か所${how ? ` ・ ${how}` : ""}` }),
      r.descriptions.length ? el("div", { class: "meta", textContent: r.descriptions[0] }) : null,
      evidence ? el("div", { class: "meta" }, "例：",
        passageLink(evidence.document_id, evidence.chunk_id,
          `${evidence.title}${evidence.heading ? ` ＞ ${evidence.heading}` : ""}`)) : null);
  }));
  const dialog = $("entity");
  if (!dialog.open) dialog.showModal();
  dialog.scrollTop = 0;
}

function passageLink(documentId, chunkId, text) {
  const link = el("a", { href: `/v1/documents/${documentId}?chunk_id=${chunkId}`,
    textContent: text });
  link.addEventListener("click", (event) => {
    event.preventDefault();
    openSource(documentId, chunkId, "");
  });
  return link;
}

const PART_HEADING = /^【([^【】\n]+)】$/;

// The answer's text, a paragraph for each block between blank lines: a block that opens with
// a 【label】 line is a part's answer under a small heading, and a closing 「比較：」 stands
// apart.
function answerBlocks(text, turn = current) {
  return text.split(/\n{2,}/).filter((block) => block.trim()).map((block) => {
    const [first, ...rest] = block.split("\n");
    const heading = first.match(PART_HEADING);
    if (!heading) {
      return el("p", { class: block.startsWith("比較：") ? "comparison" : "" },
        ...withRefs(block, turn));
    }
    return el("div", { class: "answer-part" },
      el("h3", { textContent: heading[1] }),
      rest.length ? el("p", {}, ...withRefs(rest.join("\n"), turn)) : null);
  });
}

function renderAnswer(text) {
  $("answer").replaceChildren(...answerBlocks(text));
}

// How each part of a question asked in parts stands: the mark shown, and its words.
const PART_OUTCOMES = {
  searching: ["○", "検索中…"],
  found: ["✓", "見つかりました"],
  missing: ["—", "該当なし"],
  unsearched: ["—", "時間内に調べきれず"],
};

// A part's line while the answer is worked out: 「育児休業 ✓ 見つかりました」. Only the
// status line above it is live, so a screen reader hears the plan and the writing, not every
// tick.
function partLine(label, outcome) {
  const [mark, words] = PART_OUTCOMES[outcome];
  return el("li", { class: `part ${outcome}` },
    el("span", { class: "label", textContent: label }), " ",
    el("span", { class: "mark", "aria-hidden": "true", textContent: mark }), " ",
    el("span", { class: "outcome", textContent: words }));
}

// The `plan` stage: the parts, each searching; none (a question answered whole) adds nothing
// to 「検索しています…」.
function showPlan(parts) {
  if (parts.length < 2) return;
  current.parts = parts;
  status(`${parts.length}つに分けて調べています：${parts.map((p) => p.label).join(" / ")}`);
  $("parts").classList.remove("done");
  $("parts-lead").hidden = true;
  $("parts-list").replaceChildren(...parts.map((p) => partLine(p.label, "searching")));
  $("parts").hidden = false;
}

// A `part` stage: that part's search has finished.
function showPartSearched({ index, found }) {
  const line = $("parts-list").children[index];
  if (current.parts && line) {
    line.replaceWith(partLine(current.parts[index].label, found ? "found" : "missing"));
  }
}

// Once answered, the parts in one line: 「育児休業 ✓ [1]」「介護休業 — 該当なし」, each [n] a
// link to the card that answers that part.
function summarizeParts(parts) {
  if (parts.length < 2) {
    $("parts").hidden = true;
    return;
  }
  $("parts-lead").textContent = `${parts.length}つに分けて調べました：`;
  $("parts-lead").hidden = false;
  $("parts-list").replaceChildren(...parts.map((part) => {
    const outcome = part.found ? "found" : part.searched ? "missing" : "unsearched";
    const [mark, words] = PART_OUTCOMES[outcome];
    const refs = part.citations.flatMap((n) => [" ", refLink(n)]);
    return el("li", { class: `part ${outcome}` },
      el("span", { class: "label", textContent: part.label }), " ",
      el("span", { class: "mark", "aria-hidden": "true", textContent: mark }),
      part.found ? el("span", { class: "visually-hidden", textContent: words })
                 : el("span", { class: "outcome", textContent: ` ${words}` }),
      ...refs);
  }));
  $("parts").classList.add("done");
  $("parts").hidden = false;
}

function whereIn(passage) {
  return [passage.heading, passage.page].filter(Boolean).join(" ・ ");
}

// What a passage read from a scan (`ocr`) says beside its page: its text may hold misread
// characters.
const OCR_NOTE = "スキャンから文字認識したページです。誤認識を含むことがあります。";

// A passage's heading and page, with a quiet 「OCR」 mark when its page was read from a scan
// (the note in its tooltip, and for a screen reader in its text).
function whereLine(passage) {
  const where = whereIn(passage);
  if (!where && !passage.ocr) return null;
  const ocr = passage.ocr
    ? el("span", { class: "ocr", title: OCR_NOTE }, "OCR",
        el("span", { class: "visually-hidden", textContent: `（${OCR_NOTE}）` }))
    : null;
  return el("div", { class: "where" }, where, ocr);
}

// A passage opens its document; a learned fact (an approved correction) has none to open.
function sourceLink(c, turn) {
  if (c.learned_fact) return null;
  const open = el("a", {
    href: `/v1/documents/${c.document_id}?chunk_id=${c.chunk_id}`,
    class: "open", textContent: "原文を開く",
  });
  open.addEventListener("click", (event) => {
    event.preventDefault();
    const cited = turn.cited.get(c.n);
    openSource(c.document_id, c.chunk_id, cited?.quote || "", cited?.cells || []);
  });
  return open;
}

// The quote highlighted inside its context: the sentence before and after it, dimmed.
function quoteBlock(c) {
  if (!c.quote) return null;
  const parts = c.quote.split(GAP);
  const quoted = parts.flatMap((part, i) => [
    i ? el("span", { class: "gap", textContent: `${GAP}\n` }) : null,
    el("mark", { textContent: part }),
  ]);
  const context = (text) => el("span", { class: "context", textContent: text });
  return el("blockquote", {},
    c.context_before ? context(`${c.context_before}\n`) : null,
    ...quoted,
    c.context_after ? context(`\n${c.context_after}`) : null);
}

// A table answer's citation: the rows it quotes laid out as a table under their header, the
// cells the answer states or computes from highlighted (`cells`).
function cellsBlock(c) {
  const lines = c.quote.split(GAP).flatMap((part) => part.split("\n"))
    .map((line) => line.trim()).filter((line) => line.includes(" | "));
  if (!c.cells?.length || !lines.length) return null;
  const named = c.cells.map((cell) => cell.column);
  const head = lines[0].split(" | ");
  const header = head.some((name) => named.includes(name)) ? head : null;
  const rows = (header ? lines.slice(1) : lines).map((line) => line.split(" | "));
  const cited = (value, i) => c.cells.some((cell) => cell.value === value
    && (!header || !header.includes(cell.column) || header[i] === cell.column));
  return el("div", { class: "cells" }, el("table", {},
    header ? el("thead", {}, el("tr", {}, ...header.map((name) => el("th", { textContent: name }))))
      : null,
    el("tbody", {}, ...rows.map((row) => el("tr", {}, ...row.map((value, i) =>
      el("td", { class: cited(value, i) ? "cited" : "", textContent: value })))))));
}

// A marked stretch of a passage: in a table row, the cells cited are marked on their own.
function markedPart(part, cells) {
  if (!cells?.length || !part.includes(" | ")) return el("mark", { textContent: part });
  const values = new Set(cells.map((cell) => cell.value));
  const pieces = part.split(" | ").flatMap((value, i) => [
    i ? " | " : null,
    values.has(value.trim()) ? el("strong", { class: "cell", textContent: value }) : value,
  ]);
  return el("mark", {}, ...pieces);
}

function citationCard(c, turn = current) {
  return el("li", { id: `cite-${turn.key}-${c.n}`,
                    class: c.learned_fact ? "card learned" : "card" },
    el("div", { class: "card-head" },
      el("span", { class: "num", textContent: `[${c.n}]` }),
      el("strong", { class: "title", textContent: c.title }),
      c.learned_fact ? el("span", { class: "badge", textContent: "利用者による訂正" }) : null),
    c.learned_fact ? null : el("div", { class: "path", textContent: c.path }),
    whereLine(c),
    cellsBlock(c) || quoteBlock(c),
    sourceLink(c, turn));
}

// The cards of the citations, in the answer's order.
function renderCitations(citations) {
  current.cited = new Map(citations.map((c) => [c.n, c]));
  $("citations").replaceChildren(...citations.map((c) => citationCard(c)));
  $("sources-title").hidden = citations.length === 0;
}

// A number the streamed text cites for the first time: its passage's card, quote to come.
function addCitation({ n, passage }) {
  const offered = current.offered.get(passage);
  if (!offered || current.cited.has(n)) return;
  const shown = { ...offered, n, quote: "" };
  current.cited.set(n, shown);
  $("citations").append(citationCard(shown));
  $("sources-title").hidden = false;
}

// The turn shown last made ready for `question`: empty, its number new.
function resetLive(question) {
  current = { key: ++drawn, question, queryId: null, offered: new Map(), cited: new Map(),
              parts: null };
  $("result").hidden = false;
  $("turn-question").textContent = question;
  $("asked-as").hidden = true;
  $("withheld").hidden = true;
  $("parts").hidden = true;
  $("parts-list").replaceChildren();
  $("not-found").hidden = true;
  $("warning").hidden = true;
  $("feedback").hidden = true;
  $("feedback-thanks").hidden = true;
  $("feedback-comment").value = "";
  $("feedback-send").disabled = true;
  $("correct").hidden = true;
  $("correct-form").hidden = true;
  $("correct-thanks").hidden = true;
  $("correction").value = "";
  for (const vote of $("feedback").querySelectorAll(".vote")) {
    vote.setAttribute("aria-pressed", "false");
  }
  $("answer").replaceChildren();
  $("citations").replaceChildren();
  $("sources-title").hidden = true;
}

// A notice above the conversation (not an error): null takes it away.
function notice(text) {
  $("notice").textContent = text || "";
  $("notice").hidden = !text;
}

// The conversation's last answer, kept in the URL only, for a reload to reopen it.
function remember(queryId) {
  tip = queryId;
  const url = queryId ? `${location.pathname}?c=${encodeURIComponent(queryId)}` : location.pathname;
  history.replaceState(null, "", url);
  $("new-conversation").hidden = !queryId;
  $("question").placeholder = queryId ? "続けて質問できます（例：半日単位でも取れますか）"
                                      : "例：有給休暇は何日前までに申請が必要ですか";
}

// The conversation left behind: the next question is asked on its own.
function newConversation(text = null) {
  current = null;
  $("turns").replaceChildren();
  $("result").hidden = true;
  notice(text);
  remember(null);
}

const PURGED = "前の会話は保存期間を過ぎたため、新しい会話として質問しました。";
const GONE = "前の会話は保存期間を過ぎたため開けませんでした。新しい会話を始めてください。";

function askRequest(question, follows) {
  const body = follows ? { question, stream: true, follows } : { question, stream: true };
  return api("/v1/ask", { method: "POST", body });
}

// The turn before this one stays above it, as it was answered.
function keepTurn() {
  if (current && current.queryId) $("turns").append(earlierTurn(current.result, current.key));
}

async function ask(question) {
  keepTurn();
  resetLive(question);
  notice(null);
  // Read out once it is whole, not at every piece of streamed text.
  $("answer").setAttribute("aria-busy", "true");
  $("ask-button").disabled = true;
  $("new-conversation").disabled = true; // until this answer is whole
  $("result").scrollIntoView({ block: "start" });
  status("検索しています…");
  let text = "";
  try {
    let response = await askRequest(question, tip);
    // The answer it follows has been purged: the question starts a new conversation.
    if (response.status === 404 && tip
        && (await response.clone().json().catch(() => ({}))).error === "unknown_query") {
      newConversation(PURGED);
      resetLive(question);
      response = await askRequest(question, null);
    }
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      status(`エラー：${body.detail || response.status}`, true);
      return;
    }
    for await (const { event, data } of serverEvents(response)) {
      if (event === "stage") {
        if (data.stage === "plan") showPlan(data.parts);
        else if (data.stage === "part") showPartSearched(data);
        else if (data.stage === "answer" && current.parts) status("回答を作成しています…");
      } else if (event === "citations") {
        for (const p of data.passages) current.offered.set(p.passage, p);
        status(data.passages.length ? "回答を作成しています…" : "");
      } else if (event === "delta") {
        for (const cited of data.cited || []) addCitation(cited);
        text += data.text;
        renderAnswer(text);
      } else if (event === "done") {
        finish(data);
        $("question").value = "";
      }
    }
    if (!current.queryId) status("回答を最後まで受け取れませんでした。もう一度お試しください。", true);
  } catch (error) {
    if (error.message !== "unauthorized") status("通信に失敗しました。もう一度お試しください。", true);
  } finally {
    $("answer").setAttribute("aria-busy", "false");
    if (!current.queryId) $("parts").hidden = true; // no answer: its parts' progress is moot
    $("ask-button").disabled = false;
    $("new-conversation").disabled = false;
    loadRecent();
  }
}

// 「…」として検索しました: how a follow-up was read, when not as asked.
function askedAs(result) {
  return result.asked_as && result.asked_as !== result.question
    ? `「${result.asked_as}」として検索しました` : "";
}

// An answer, streamed or reopened, as the last turn shows it; a reopened answer whose
// passages the employee may no longer read shows its question alone.
function finish(result) {
  current.queryId = result.query_id;
  current.result = { question: current.question, ...result };
  remember(result.query_id);
  status("");
  $("asked-as").textContent = askedAs(current.result);
  $("asked-as").hidden = !askedAs(current.result);
  if (result.answer_shown === false) {
    $("withheld").hidden = false;
    return;
  }
  if (!result.found) {
    $("answer").replaceChildren();
    renderCitations([]);
    summarizeParts(result.parts || []);
    $("not-found").hidden = false;
  } else {
    renderCitations(result.citations); // before the text, whose [n] link to these cards
    current.entities = new Map((result.entities || []).map((e) => [e.name.toLowerCase(), e]));
    current.entityPattern = entityPattern(result.entities || []);
    renderAnswer(result.answer);
    summarizeParts(result.parts || []);
    // What a correction concerns: the cited passages of documents, not other corrections.
    current.correctable = result.citations.filter((c) => !c.learned_fact)
      .map((c) => c.chunk_id);
    $("correct").hidden = current.correctable.length === 0;
    if (!result.verified) {
      $("warning").textContent = UNVERIFIED;
      $("warning").hidden = false;
    }
  }
  $("feedback").hidden = false;
}

// A copy of one of the page's own blocks, without its ids, shown.
function copyOf(block) {
  const copy = block.cloneNode(true);
  for (const node of [copy, ...copy.querySelectorAll("[id]")]) node.removeAttribute("id");
  copy.hidden = false;
  return copy;
}

// An earlier turn of the conversation: its question, how it was read, and its answer with its
// citations and feedback, or why it is not shown.
function earlierTurn(result, key) {
  const turn = {
    key, cited: new Map((result.citations || []).map((c) => [c.n, c])),
    entities: new Map((result.entities || []).map((e) => [e.name.toLowerCase(), e])),
    entityPattern: entityPattern(result.entities || []),
  };
  const read = askedAs(result);
  let body;
  if (result.answer_shown === false) {
    body = [copyOf(PRISTINE.withheld)];
  } else if (!result.found) {
    body = [copyOf(PRISTINE.notFound)];
  } else {
    body = [
      el("div", { class: "answer" }, ...answerBlocks(result.answer, turn)),
      result.verified ? null : el("p", { class: "warning", textContent: UNVERIFIED }),
      result.citations.length ? el("h3", { textContent: "出典" }) : null,
      el("ol", { class: "citations" }, ...result.citations.map((c) => citationCard(c, turn))),
    ];
  }
  const feedback = result.answer_shown === false ? null : copyOf(PRISTINE.feedback);
  if (feedback) {
    // Folded to its 👍/👎 until one is chosen: the turns above stay short.
    feedback.classList.add("folded");
    feedback.querySelector(".send").disabled = true;
    wireFeedback(feedback, () => result.query_id);
  }
  return el("li", {}, el("article", { class: "result turn" },
    el("p", { class: "turn-question", textContent: result.question }),
    read ? el("p", { class: "asked-as", textContent: read }) : null,
    ...body, feedback));
}

// The conversation that ends at the answer `queryId`, as the employee left it: its earlier
// turns above, its last one ready to be followed. One whose answers have been purged starts
// a new conversation, with a notice.
async function reopen(queryId) {
  const response = await api(`/v1/conversations/${encodeURIComponent(queryId)}`);
  if (!response.ok) {
    newConversation(response.status === 404 ? GONE : "会話を開けませんでした。");
    return;
  }
  const { turns } = await response.json();
  newConversation();
  const last = turns.pop();
  $("turns").replaceChildren(...turns.map((turn) => earlierTurn(turn, ++drawn)));
  resetLive(last.question);
  finish(last);
}

// The 👍/👎 of one answer: a vote is chosen first and sent with the comment, as one piece of
// feedback.
function wireFeedback(block, queryIdOf) {
  const votes = block.querySelectorAll(".vote");
  for (const button of votes) {
    button.addEventListener("click", () => {
      for (const other of votes) other.setAttribute("aria-pressed", String(other === button));
      block.dataset.helpful = button.dataset.helpful;
      block.classList.remove("folded");
      block.querySelector(".send").disabled = false;
    });
  }
  block.querySelector(".send").addEventListener("click", () => sendFeedback(block, queryIdOf()));
}

async function sendFeedback(block, queryId) {
  if (!queryId) return;
  const comment = block.querySelector(".comment").value.trim();
  const body = { query_id: queryId, helpful: block.dataset.helpful === "true" };
  if (comment) body.comment = comment;
  const response = await api("/v1/feedback", { method: "POST", body });
  const thanks = block.querySelector(".thanks");
  thanks.textContent = response.ok ? "フィードバックを送信しました。ありがとうございます。"
                                   : "フィードバックを送信できませんでした。";
  thanks.hidden = false;
  if (response.ok) block.querySelector(".send").disabled = true;
}

async function sendCorrection() {
  const correction = $("correction").value.trim();
  if (!correction || !current || !current.queryId) return;
  const response = await api("/v1/corrections", {
    method: "POST",
    body: { query_id: current.queryId, correction, chunk_ids: current.correctable },
  });
  const thanks = $("correct-thanks");
  thanks.textContent = response.ok
    ? "訂正を送信しました。審査担当者が確認してから回答に反映されます。"
    : "訂正を送信できませんでした。";
  thanks.hidden = false;
  if (response.ok) $("correct-form").hidden = true;
}

// The reviewer's list: each correction with the passages it concerns, approved or rejected
// here; the list is read again after each decision.
async function loadReview() {
  const response = await api("/v1/corrections");
  if (!response.ok) return;
  const { corrections } = await response.json();
  $("review-empty").hidden = corrections.length > 0;
  $("review-list").replaceChildren(...corrections.map((c) => {
    const decide = (action) => async () => {
      const body = action === "reject" ? {} : undefined;
      await api(`/v1/corrections/${c.id}/${action}`, { method: "POST", body });
      loadReview();
    };
    const approve = el("button", { type: "button", textContent: "承認" });
    approve.addEventListener("click", decide("approve"));
    const reject = el("button", { type: "button", class: "reject", textContent: "却下" });
    reject.addEventListener("click", decide("reject"));
    const retired = c.status === "retired" ? "（文書が変更されたため再審査）" : "";
    return el("li", { class: "review-item", "data-id": String(c.id) },
      el("div", { class: "meta",
        textContent: `#${c.id} ${c.submitter_name} ・ ${c.submitted_at.slice(0, 10)}${retired}` }),
      el("div", { textContent: `質問：${c.question}` }),
      el("blockquote", { class: "correction", textContent: c.correction }),
      ...c.passages.map((p) => el("div", { class: "source",
        textContent: `出典：${p.path} ・ ${p.heading}${p.gone ? "（削除済み）" : p.changed ? "（変更あり）" : ""}` })),
      el("div", { class: "decide" }, approve, reject));
  }));
}

const EXAMPLES = 3; // questions shown for a knowledge gap's topic

// A timestamp's date where the reader is, as YYYY-MM-DD (the report's are UTC; Swedish
// writes dates in that order).
const dateOf = (iso) => new Date(iso).toLocaleDateString("sv-SE");

// A document of the report: its title opens it in the viewer, at the passage the report names
// (the one retrieved for a topic, else its first).
function gapTitle(d) {
  const open = el("button", { type: "button", class: "link", textContent: d.title });
  open.addEventListener("click", () => openSource(d.document_id, d.chunk_id, ""));
  return open;
}

function gapDocument(d, detail = null) {
  return el("li", {}, gapTitle(d), el("span", { class: "path", textContent: `（${d.path}）` }),
    detail ? el("span", { class: "meta", textContent: ` ・ ${detail}` }) : null);
}

function gapTopic(t) {
  const more = t.questions.length - EXAMPLES;
  return el("li", { class: "gap-topic" },
    el("div", { class: "meta" }, el("strong", { textContent: `${t.asked} 回` }),
      t.unhelpful > 0 ? `（うち役に立たなかった回答 ${t.unhelpful}）` : null),
    el("ul", { class: "gap-questions" }, ...t.questions.slice(0, EXAMPLES).map((q) =>
      el("li", {}, q.question,
        q.asked > 1 ? el("span", { class: "times", textContent: ` ×${q.asked}` }) : null))),
    more > 0 ? el("div", { class: "meta", textContent: `ほか ${more} 件` }) : null,
    t.closest.length === 0 ? null : el("div", { class: "closest" }, "近い文書：",
      ...t.closest.flatMap((d, i) => [i ? "、" : "", gapTitle(d), `（${d.path}）`])));
}

// The knowledge-gap report of the window chosen; the panel stays hidden when it cannot be
// read.
async function loadGaps() {
  const days = $("gaps-days").value;
  const response = await api(`/v1/gaps?days=${days}`);
  const report = response.ok ? await response.json() : null;
  if (days !== $("gaps-days").value) return; // another window was chosen meanwhile
  $("gaps").hidden = !report;
  if (!report) return;
  $("gap-topics").replaceChildren(...report.topics.map(gapTopic));
  $("gaps-empty").hidden = report.topics.length > 0;
  $("gap-stale").replaceChildren(...report.stale.map((d) =>
    gapDocument(d, `引用 ${d.cited} 回 ・ ${dateOf(d.unchanged_since)} から変更なし`)));
  $("gap-stale-block").hidden = report.stale.length === 0;
  const recorded = new Date(report.citations_since) > new Date(report.since)
    ? `・引用の記録は ${dateOf(report.citations_since)} から` : "";
  $("gap-uncited-summary").textContent =
    `引用されていない文書（${report.never_cited.length} 件${recorded}）`;
  $("gap-uncited-list").replaceChildren(...report.never_cited.map((d) => gapDocument(d)));
  $("gap-uncited").hidden = report.never_cited.length === 0;
}

// A passage's text with the parts of `quote` in it marked, in order, and in them the table
// cells a table answer cites.
function markedText(content, quote, cells) {
  const nodes = [];
  let at = 0;
  for (const part of quote.split(GAP).map((p) => p.trim()).filter(Boolean)) {
    const found = content.indexOf(part, at);
    if (found < 0) continue;
    nodes.push(content.slice(at, found), markedPart(part, cells));
    at = found + part.length;
  }
  nodes.push(content.slice(at));
  return nodes;
}

async function openSource(documentId, chunkId, quote, cells = []) {
  const response = await api(`/v1/documents/${documentId}?chunk_id=${chunkId}`);
  const dialog = $("source");
  if (!response.ok) {
    status("この文書は表示できません（削除されたか、閲覧権限がありません）。", true);
    return;
  }
  const doc = await response.json();
  $("source-title").textContent = doc.title;
  const revised = doc.revision_date ? ` ・ 改定日 ${doc.revision_date}` : "";
  $("source-meta").textContent = `${doc.path}${revised}`;
  const passages = $("source-passages");
  passages.replaceChildren(...doc.passages.map((p) =>
    el("section", { class: p.cited ? "passage cited" : "passage" },
      whereLine(p),
      el("p", {}, ...(p.cited ? markedText(p.content, quote, cells) : [p.content])))));
  const download = $("source-download");
  download.hidden = !doc.original_url;
  if (doc.original_url) download.href = doc.original_url;
  dialog.showModal();
  // The cited cell, else the quoted sentence, else the cited passage, in the middle of the view.
  const target = passages.querySelector(".cited .cell") || passages.querySelector(".cited mark")
    || passages.querySelector(".cited");
  if (target) target.scrollIntoView({ block: "center" });
}

async function loadRecent() {
  const response = await api("/v1/recent-questions");
  if (!response.ok) return;
  const { items } = await response.json();
  const list = $("recent");
  if (!items.length) return;
  // Each reopens the conversation of its latest answer.
  list.replaceChildren(...items.map((item) => {
    const button = el("button", { type: "button", class: "link", textContent: item.question,
                                  title: "この会話を開く" });
    button.addEventListener("click", async () => {
      if ($("ask-button").disabled) return; // an answer is still coming
      await reopen(item.query_id);
      ($("turns").firstElementChild || $("result")).scrollIntoView({ block: "start" });
    });
    return el("li", {}, button);
  }));
}

function start() {
  const signedIn = document.body.dataset.signedIn === "true";
  $("signed-in").hidden = !signedIn;
  $("who").hidden = !signedIn;
  $("signed-out").hidden = signedIn;
  $("sign-in").hidden = document.body.dataset.signInAvailable !== "true";
  if (!signedIn) return;
  PRISTINE.feedback = $("feedback").cloneNode(true);
  PRISTINE.notFound = $("not-found").cloneNode(true);
  PRISTINE.withheld = $("withheld").cloneNode(true);
  $("ask-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const question = $("question").value.trim();
    if (question) ask(question);
  });
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      $("ask-form").requestSubmit();
    }
  });
  wireFeedback($("feedback"), () => current && current.queryId);
  $("new-conversation").addEventListener("click", () => {
    newConversation();
    $("question").focus();
  });
  $("correct-open").addEventListener("click", () => {
    $("correct-form").hidden = false;
    $("correction").focus();
  });
  $("correct-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sendCorrection();
  });
  if (document.body.dataset.reviewer === "true") {
    $("review").hidden = false;
    loadReview();
    $("gaps-days").addEventListener("change", loadGaps);
    loadGaps();
  }
  $("sign-out").addEventListener("click", async () => {
    await api("/auth/logout", { method: "POST" });
    window.location.href = "/";
  });
  loadRecent();
  // A conversation the URL names (a reload): reopened from the server.
  const reopened = new URLSearchParams(location.search).get("c");
  if (reopened && QUERY_ID.test(reopened)) reopen(reopened);
  else if (reopened) remember(null);
}

start();
