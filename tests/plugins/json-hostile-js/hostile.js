// Not an SDK plugin: its own register and call, so that its answers can be any bytes.
//   first:  the first byte of the request it got (123 when the host sent JSON)
//   raw:    bin data in (so the request is MessagePack): those bytes are the answer
//   deep:   n: a JSON answer whose value nests n arrays deep
//   digits: n: a JSON answer whose value is an integer of n digits
//   big:    n: a JSON answer whose value is a string of n bytes
//   echo:   the data back, in the request's codec
import { pack, unpack } from "wasmext";

const utf8 = new TextEncoder();
const json = (text) => utf8.encode(`{"ok":true,"value":${text}}`);

export function register(request) {
  const req = unpack(request);
  const optIn = !(req.settings && req.settings.json === false);
  return pack({ hooks: ["first", "raw", "deep", "digits", "big", "echo"].map((h) => ({ hook: h })),
    ...(optIn ? { codecs: ["json"] } : {}) });
}

export function call(request) {
  const isJson = request[0] === 0x7b;
  const req = isJson ? JSON.parse(new TextDecoder().decode(request)) : unpack(request);
  switch (req.hook) {
    case "first": return isJson ? json(String(request[0])) : pack({ ok: true, value: request[0] });
    case "raw": return req.data;
    case "deep": return json("[".repeat(req.data) + "]".repeat(req.data));
    case "digits": return json("9".repeat(req.data));
    case "big": return json(`"${"x".repeat(req.data)}"`);
    default: return isJson ? json(JSON.stringify(req.data)) : pack({ ok: true, value: req.data });
  }
}
