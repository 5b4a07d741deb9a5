// Layer 3: the plugin interface. A plugin extends Plugin (every method has a
// do-nothing default), lists its hooks, and exports what definePlugin returns:
//
//   class Hello extends Plugin {
//     hooks() { return [hook("greet", (name) => `${config("greeting", "Hello")}, ${name}!`)]; }
//   }
//   export const { register, call } = definePlugin(new Hello());
//
// A handler returns the new value; UNCHANGED passes the input on, new Stop(v)
// ends the chain; throwing Fail(code, message) or a HostError answers an error
// map; any other exception answers "failed" with its text.
import { HostError } from "./host.js";
import { ABI_MINOR, noteRegistration } from "./world.js";
import { pack, packAnswer, unpack } from "./msgpack.js";

export const UNCHANGED = Symbol("unchanged");

export class Fail extends Error {
  constructor(code, message = "") { super(message || code); this.code = code; this.detail = message; }
}

// An output extension's failed result (reference 003's error_result): `throw errorResult(m)`.
export function errorResult(message) { return new Fail("invalid", String(message)); }

export class Stop {
  constructor(value = UNCHANGED) { this.value = value; }
}

// One hook registration: name, handler, and optionally priority (0..100) and pattern.
export function hook(name, handler, { priority, pattern } = {}) {
  if (priority !== undefined && !(priority >= 0 && priority <= 100)) {
    throw new Error(`hook ${name}: priority must be 0..100`);
  }
  return { name, handler, priority, pattern };
}

export class Plugin {
  info() { return {}; }            // { name, version } for the registration map
  hooks() { return []; }           // hook(...) entries
  extra() { return {}; }           // extra registration entries (prompt, tools, ...)
  onRegister(request) {}           // the registration request (settings inside)
  unhandled(call) { throw new Fail("unhandled", `no handler for hook ${call.hook}`); }
}

function matches(pattern, subject) {
  return pattern.endsWith("*") ? subject.startsWith(pattern.slice(0, -1)) : subject === pattern;
}

function answer(value) {
  if (value instanceof Stop) {
    return value.value === UNCHANGED ? { ok: true, stop: true } : { ok: true, value: value.value, stop: true };
  }
  return value === UNCHANGED ? null : { ok: true, value: value === undefined ? null : value };
}

function failure(e) {
  if (e instanceof Fail || e instanceof HostError) return { ok: false, error: { code: e.code, message: e.detail } };
  return { ok: false, error: { code: "failed", message: `${e && e.name}: ${e && e.message}` } };
}

// The entry a call goes to: the first of its hook's entries whose pattern (if any)
// matches the data's tag or name. Most hooks have one entry and no pattern.
function pick(entries, data) {
  if (entries === undefined) return undefined;
  if (entries.length === 1 && entries[0].pattern === undefined) return entries[0];
  const subject = data && typeof data === "object" ? (data.tag ?? data.name) : undefined;
  return entries.find((x) => x.pattern === undefined ||
    (typeof subject === "string" && matches(x.pattern, subject)));
}

export function definePlugin(plugin) {
  let byName = new Map(); // hook name -> its entries, in registration order
  return {
    register(request) {
      const req = unpack(request);
      noteRegistration(req);
      plugin.settings = (req && typeof req.settings === "object") ? req.settings : {};
      plugin.onRegister(req);
      const hooks = plugin.hooks();
      byName = new Map();
      for (const h of hooks) {
        if (!byName.has(h.name)) byName.set(h.name, []);
        byName.get(h.name).push(h);
      }
      const reg = { hooks: [], abi_minor: ABI_MINOR, codecs: ["json"] };
      for (const h of hooks) {
        const entry = { hook: h.name };
        if (h.priority !== undefined) entry.priority = h.priority;
        if (h.pattern !== undefined) entry.pattern = h.pattern;
        reg.hooks.push(entry);
      }
      const info = plugin.info();
      if (info.name !== undefined) reg.name = info.name;
      if (info.version !== undefined) reg.version = info.version;
      return pack({ ...reg, ...plugin.extra() });
    },
    call(request) {
      let req;
      const json = request[0] === 0x7b; // undefined for an empty request
      try {
        req = json ? readJson(request) : unpack(request);
      } catch (e) {
        return pack({ ok: false, error: { code: "invalid", message: e.message } });
      }
      const name = typeof req.hook === "string" ? req.hook : String(req.hook ?? "");
      const data = req.data ?? null;
      const call = { hook: name, data, meta: req.meta ?? {} };
      try {
        const entries = byName.get(name);
        // One entry without a pattern (most hooks): no `pick` call on the hot path.
        const h = entries !== undefined && entries.length === 1 && entries[0].pattern === undefined
          ? entries[0] : pick(entries, data);
        const value = h !== undefined ? h.handler.call(plugin, data, call) : plugin.unhandled(call);
        if (value === UNCHANGED) return new Uint8Array(0);
        // The common answer: the value behind the answer's fixed head, no map around it.
        if (!(value instanceof Stop)) {
          const v = value === undefined ? null : value;
          return (json && jsonAnswer(v, MAX_DEPTH - 1)) || packAnswer(v);
        }
        return pack(answer(value));
      } catch (e) {
        return pack(failure(e));
      }
    },
  };
}
