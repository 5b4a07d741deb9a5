// Helpers for output extensions, as reference 003's helpers library offers them.
// No host call: extractJsonFromText (the first JSON object or array in a model's
// answer, fenced or not), countWords, extractSentences, extractCodeBlocks,
// truncate, and the result builders jsonResult / textResult (a value the host
// unwraps into the result's content, content type and metadata) and errorResult
// (in plugin.js, beside Fail: throw it and the host marks that result failed).
// This module imports nothing, so it also runs outside a component (node).

export const RESULT_KEY = "extension_result";
const FENCE = /```[ \t]*([\w+-]*)[ \t]*\n([\s\S]*?)```/g;
const MAX_SCAN = 1 << 20;

// Every try scans ahead for its closing bracket: all tries together may scan at most
// WORK characters, so hostile text full of brackets costs linear time, not quadratic.
const WORK = 4 * MAX_SCAN;

function firstJson(text) {
  let tries = 0;
  const budget = { left: WORK };
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c !== "{" && c !== "[") continue;
    if (++tries > 256 || budget.left <= 0) return null; // hostile text: give up
    const end = matching(text, i, budget);
    if (end < 0) continue;
    try {
      return JSON.parse(text.slice(i, end + 1));
    } catch {
      continue;
    }
  }
  return null;
}

// The index of the bracket closing the one at `start` (strings skipped), or -1.
function matching(text, start, budget) {
  const stack = [];
  let inString = false;
  for (let i = start; i < text.length; i++) {
    if (--budget.left < 0) return -1;
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "{" || c === "[") stack.push(c === "{" ? "}" : "]");
    else if (c === "}" || c === "]") {
      if (stack.pop() !== c) return -1;
      if (stack.length === 0) return i;
    }
  }
  return -1;
}

export function extractJsonFromText(text) {
  const scanned = String(text).slice(0, MAX_SCAN);
  for (const m of scanned.matchAll(FENCE)) {
    const found = firstJson(m[2]);
    if (found !== null) return found;
  }
  return firstJson(scanned);
}

export function countWords(text) {
  const words = String(text).trim().split(/\s+/);
  return words[0] === "" ? 0 : words.length;
}

export function extractSentences(text) {
  return String(text).trim().split(/(?<=[.!?])\s+/).map((s) => s.trim()).filter(Boolean);
}

export function extractCodeBlocks(text) {
  return [...String(text).matchAll(FENCE)].map((m) => ({ language: m[1], code: m[2] }));
}

export function truncate(text, maxChars = 1000) {
  const s = String(text);
  if (s.length <= maxChars) return s;
  const cut = s.slice(0, Math.max(0, maxChars - 1));
  const space = cut.lastIndexOf(" ");
  return (space > 0 ? cut.slice(0, space) : cut).trimEnd() + "…";
}

export function jsonResult(content, metadata = {}) {
  return { [RESULT_KEY]: { content, content_type: "application/json", metadata } };
}

export function textResult(content, metadata = {}) {
  return { [RESULT_KEY]: { content: String(content), content_type: "text/plain", metadata } };
}
