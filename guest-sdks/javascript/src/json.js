// The component world's JSON payloads (abi/SPEC.md section 8): a call request the host
// sent as JSON text, and an answer written as JSON when JSON carries it exactly.
//
// "Exactly" means the host reads back the value the MessagePack writer would have
// sent: JSON.stringify alone would write NaN and Infinity as null, drop undefined
// members, turn a Uint8Array (bin) into an object of indices and a Map into {}, and
// call toJSON (a Date becomes a string). The replacer refuses each of those, and the
// answer then goes as MessagePack; so does one whose text escapes a lone surrogate
// (MessagePack's writer sends U+FFFD) or that may nest deeper than the ABI allows.

const jsonUtf8 = new TextEncoder();
const jsonUtf8Strict = new TextDecoder("utf-8", { fatal: true });
const NOT_JSON = new Error("not exactly JSON");

export function readJson(request) {
  return JSON.parse(jsonUtf8Strict.decode(request));
}

function faithful(key, value) {
  // A toJSON result differs from what the holder holds; so does NaN from itself.
  if (this[key] !== value) throw NOT_JSON;
  switch (typeof value) {
    case "string":
    case "boolean":
      return value;
    case "number":
      if (value - value === 0) return value; // finite
      throw NOT_JSON;
    case "object": {
      if (value === null || Array.isArray(value)) return value;
      const proto = Object.getPrototypeOf(value);
      if (proto === Object.prototype || proto === null) return value;
      throw NOT_JSON; // Uint8Array, Map, class instances: the MessagePack writer's forms
    }
    default:
      throw NOT_JSON; // undefined, BigInt, functions, symbols
  }
}

// At most `limit` '[' and '{' in `text` (inside strings too: an over-count only
// sends the answer as MessagePack, whose writer checks the real depth).
function fewOpeners(text, limit) {
  if (text.length < 2 * (limit + 1)) return true;
  let n = 0;
  for (const c of ["[", "{"]) {
    for (let i = text.indexOf(c); i >= 0; i = text.indexOf(c, i + 1)) if (++n > limit) return false;
  }
  return true;
}

// The bytes of {"ok": true, "value": value} as JSON, or null when JSON would not
// carry `value` exactly (the caller then writes MessagePack).
export function jsonAnswer(value, maxDepth) {
  let text;
  try {
    text = JSON.stringify(value, faithful);
  } catch (e) {
    return null; // NOT_JSON, a BigInt, a cycle: the MessagePack writer decides
  }
  if (text === undefined || text.includes("\\u") && /\\u[dD][89a-fA-F]/.test(text)) return null;
  if (!fewOpeners(text, maxDepth)) return null;
  return jsonUtf8.encode(`{"ok":true,"value":${text}}`);
}
