// The component world's JSON payloads (abi/SPEC.md section 8): a call request the host
// sent as JSON text, and an answer written as JSON when JSON carries it exactly.
//
// "Exactly" means the host reads back the value the MessagePack writer would have
// sent: JSON.stringify alone would write NaN and Infinity as null, drop undefined
// members, turn a Uint8Array (bin) into an object of indices and a Map into {}, and
// call toJSON (a Date becomes a string). `plainJson` refuses each of those, and the
// answer then goes as MessagePack; so does one whose text escapes a lone surrogate
// (MessagePack's writer sends U+FFFD) or that nests deeper than the ABI allows.

const jsonUtf8 = new TextEncoder();
const jsonUtf8Strict = new TextDecoder("utf-8", { fatal: true });

export function readJson(request) {
  return JSON.parse(jsonUtf8Strict.decode(request));
}

const OBJECT = Object.prototype;

// True when JSON.stringify writes the container `value` as the MessagePack writer would
// (see above) and it nests at most `room` containers. A walk in JavaScript: a replacer
// costs a call from the engine into JavaScript for every value, several times more.
function plainJson(value, room) {
  // A toJSON, own or inherited (a Date's, a polluted prototype's), replaces the value.
  if (room <= 0 || value.toJSON !== undefined) return false;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const item = value[i]; // a hole reads as undefined: refused
      switch (typeof item) {
        case "string": case "boolean": continue;
        case "number": if (item - item === 0) continue; return false; // finite
        case "object": if (item === null || plainJson(item, room - 1)) continue; return false;
        default: return false;
      }
    }
    return true;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== OBJECT && proto !== null) return false; // Uint8Array, Map, class instances
  for (const key in value) {
    const item = value[key];
    switch (typeof item) {
      case "string": case "boolean": continue;
      case "number": if (item - item === 0) continue; return false;
      case "object": if (item === null || plainJson(item, room - 1)) continue; return false;
      default: return false; // undefined, BigInt, functions
    }
  }
  return true;
}

// The bytes of {"ok": true, "value": value} as JSON, or null when JSON would not
// carry `value` exactly (the caller then writes MessagePack).
export function jsonAnswer(value, maxDepth) {
  let text;
  try {
    switch (typeof value) {
      case "string": case "boolean": break;
      case "number": if (value - value === 0) break; return null;
      case "object": if (value === null || plainJson(value, maxDepth)) break; return null;
      default: return null;
    }
    text = JSON.stringify(value);
  } catch (e) {
    return null; // a getter that throws: the MessagePack writer decides
  }
  if (text.includes("\\u") && /\\u[dD][89a-fA-F]/.test(text)) return null;
  return jsonUtf8.encode(`{"ok":true,"value":${text}}`);
}
