// Layer 2: the host's services as functions that return values or throw HostError.
import { rawHostCall, rawLog, LOG_LEVELS } from "./raw.js";
import { pack, unpack } from "./msgpack.js";

export class HostError extends Error {
  constructor(code, message = "") {
    super(message ? `${code}: ${message}` : code);
    this.code = code;
    this.detail = message;
  }
}

const MISSING = Symbol("missing");

// The host's whole answer map to a raw host-call request.
export function request(req) {
  let answer;
  try {
    answer = unpack(rawHostCall(pack(req)));
  } catch (e) {
    throw new HostError("internal", `unreadable host answer: ${e.message}`);
  }
  if (answer === null || typeof answer !== "object" || typeof answer.ok !== "boolean") {
    throw new HostError("internal", "the host answer is not an ABI v1 answer map");
  }
  return answer;
}

export function hostOp(op, args = {}) {
  const answer = request({ op, ...args });
  if (answer.ok) return answer.value ?? null;
  const error = answer.error ?? {};
  throw new HostError(String(error.code ?? "internal"),
    typeof error.message === "string" ? error.message : "");
}

function orDefault(fn, fallback) {
  try {
    return fn();
  } catch (e) {
    if (e instanceof HostError && e.code === "not_found" && fallback !== MISSING) return fallback;
    throw e;
  }
}

export function config(key, fallback = MISSING) {
  return orDefault(() => hostOp("config.get", { key }), fallback);
}
export function secret(key) { return hostOp("secret.get", { key }); }
// State scope: "session" (the default in every SDK and the host) or "plugin" (shared by
// the plugin's sessions; the only scope a call outside a session may use).
export function stateGet(key, fallback = MISSING, scope = "session") {
  return orDefault(() => hostOp("state.get", { key, scope }), fallback);
}
export function stateSet(key, value, scope = "session") { hostOp("state.set", { key, value, scope }); }
export function stateDelete(key, scope = "session") { return Boolean(hostOp("state.delete", { key, scope })); }
export function stateKeys(prefix = "", scope = "session") { return hostOp("state.keys", { prefix, scope }); }
export function emit(topic, payload = null) { return hostOp("event.emit", { topic, payload }); }
export function log(text, level = "info") { rawLog(LOG_LEVELS[level] ?? 2, String(text)); }
