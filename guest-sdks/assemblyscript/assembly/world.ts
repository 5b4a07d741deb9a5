// Typed wrappers for the ops beyond config/secret: state.* and event.emit
// (minor 0); http.fetch, llm.complete, agents.request and agents.send (minor
// 1), which answer `unsupported` locally when the host announced a minor below
// 1 (SPEC 3.1).
import { ErrorCode, Op } from "./abi";
import { Answer, hostAbiMinor, hostCallWriter, localAnswer, request } from "./host";
import { Bytes, Writer } from "./msgpack";

function tooOld(): Answer {
  return localAnswer(ErrorCode.UNSUPPORTED, "the host's ABI minor is below 1");
}

/** `http.fetch` (grants `http`, `http:<host pattern>`): `headers` is null or
 * one encoded MessagePack map of strings, `body` null for none. The answer's
 * value is `{status, headers, body, url}`. */
export function httpFetch(method: string, url: string, headers: Bytes | null = null,
                          body: Uint8Array | null = null): Answer {
  if (hostAbiMinor() < 1) return tooOld();
  const w = request(Op.HTTP_FETCH, 2 + (headers !== null ? 1 : 0) + (body !== null ? 1 : 0));
  w.writeString("url");
  w.writeString(url);
  w.writeString("method");
  w.writeString(method);
  if (headers !== null) {
    w.writeString("headers");
    w.writeRaw(headers);
  }
  if (body !== null) {
    w.writeString("body");
    w.writeBin(body);
  }
  return hostCallWriter(w);
}

/** One `llm.complete` request; empty strings, 0 and a negative temperature
 * are left to the host. */
export class Completion {
  system: string = "";
  prompt: string = "";
  model: string = "";
  maxTokens: i32 = 0;
  temperature: f64 = -1;
  /** Ask the model for a JSON object (reference 003's `call_llm(json_mode=True)`). */
  jsonMode: bool = false;
}

function message(w: Writer, role: string, content: string): void {
  w.writeMap(2);
  w.writeString("role");
  w.writeString(role);
  w.writeString("content");
  w.writeString(content);
}

/** `llm.complete` (grant `llm`): the answer's value is `{text, finish_reason,
 * model, usage: {input, output}, cost}`. */
export function llmComplete(c: Completion): Answer {
  if (hostAbiMinor() < 1) return tooOld();
  const extra = (c.model.length > 0 ? 1 : 0) + (c.maxTokens > 0 ? 1 : 0) + (c.temperature >= 0 ? 1 : 0) +
    (c.jsonMode ? 1 : 0);
  const w = request(Op.LLM_COMPLETE, 1 + extra);
  w.writeString("messages");
  w.writeArray(c.system.length > 0 ? 2 : 1);
  if (c.system.length > 0) message(w, "system", c.system);
  message(w, "user", c.prompt);
  if (c.model.length > 0) {
    w.writeString("model");
    w.writeString(c.model);
  }
  if (c.maxTokens > 0) {
    w.writeString("max_tokens");
    w.writeInt(c.maxTokens);
  }
  if (c.temperature >= 0) {
    w.writeString("temperature");
    w.writeFloat(c.temperature);
  }
  if (c.jsonMode) {
    w.writeString("json_mode");
    w.writeBool(true);
  }
  return hostCallWriter(w);
}

function agentsOp(op: string, agent: string, input: Bytes, timeoutMs: i32): Answer {
  if (hostAbiMinor() < 1) return tooOld();
  const w = request(op, 2 + (timeoutMs > 0 ? 1 : 0));
  w.writeString("agent");
  w.writeString(agent);
  w.writeString("input");
  w.writeRaw(input);
  if (timeoutMs > 0) {
    w.writeString("timeout_ms");
    w.writeInt(timeoutMs);
  }
  return hostCallWriter(w);
}

/** `agents.request` (grants `agents`, `agents:<pattern>`; turn and step
 * middleware only): `input` is one encoded MessagePack value; timeoutMs 0 is
 * the host's 15 s. The answer's value is the agent's answer. */
export function agentsRequest(agent: string, input: Bytes, timeoutMs: i32 = 0): Answer {
  return agentsOp(Op.AGENTS_REQUEST, agent, input, timeoutMs);
}

/** `agents.send`: agentsRequest without waiting for the answer. */
export function agentsSend(agent: string, input: Bytes): Answer {
  return agentsOp(Op.AGENTS_SEND, agent, input, 0);
}

// ---- state.* and event.emit (minor 0) ------------------------------------

/** State scopes: SESSION (the default in every SDK and the host: this
 * session's value) or PLUGIN (shared by the plugin's sessions; the only scope
 * a call outside a session may use). */
export namespace Scope {
  export const SESSION = "session";
  export const PLUGIN = "plugin";
}

// "scope" is written only when the caller names one: the host's default is the session's.
function stateRequest(op: string, scope: string, args: u32): Writer {
  const w = request(op, args + (scope.length > 0 ? 1 : 0));
  if (scope.length > 0) {
    w.writeString("scope");
    w.writeString(scope);
  }
  return w;
}

/** `state.get` (grant `state`): the answer's value is the stored value; a
 * missing key answers `not_found`. `scope` "" is the session's. */
export function stateGet(key: string, scope: string = ""): Answer {
  const w = stateRequest(Op.STATE_GET, scope, 1);
  w.writeString("key");
  w.writeString(key);
  return hostCallWriter(w);
}

/** `state.set` (grant `state`): `value` is one encoded MessagePack value;
 * `ttl` 0 leaves the expiry to the host. */
export function stateSet(key: string, value: Bytes, scope: string = "", ttl: i32 = 0): Answer {
  const w = stateRequest(Op.STATE_SET, scope, 2 + (ttl > 0 ? 1 : 0));
  w.writeString("key");
  w.writeString(key);
  w.writeString("value");
  w.writeRaw(value);
  if (ttl > 0) {
    w.writeString("ttl");
    w.writeInt(ttl);
  }
  return hostCallWriter(w);
}

/** `state.set` of one string value. */
export function stateSetString(key: string, value: string, scope: string = ""): Answer {
  const encoded = new Writer(value.length + 8);
  encoded.writeString(value);
  return stateSet(key, encoded.bytes(), scope);
}

/** `state.delete` (grant `state`): the answer's value is whether the key existed. */
export function stateDelete(key: string, scope: string = ""): Answer {
  const w = stateRequest(Op.STATE_DELETE, scope, 1);
  w.writeString("key");
  w.writeString(key);
  return hostCallWriter(w);
}

/** `state.keys` (grant `state`): the answer's value is an array of key strings. */
export function stateKeys(prefix: string = "", scope: string = ""): Answer {
  const w = stateRequest(Op.STATE_KEYS, scope, prefix.length > 0 ? 1 : 0);
  if (prefix.length > 0) {
    w.writeString("prefix");
    w.writeString(prefix);
  }
  return hostCallWriter(w);
}

/** `event.emit` (grants `events`, `emit:<pattern>`): `payload` is one encoded
 * MessagePack value, null for nil; the answer's value is how many subscribers
 * it reached. */
export function emit(topic: string, payload: Bytes | null = null): Answer {
  const w = request(Op.EVENT_EMIT, 2);
  w.writeString("topic");
  w.writeString(topic);
  w.writeString("payload");
  if (payload !== null) w.writeRaw(payload);
  else w.writeNil();
  return hostCallWriter(w);
}

/** `event.emit` with a string payload. */
export function emitString(topic: string, payload: string): Answer {
  const encoded = new Writer(payload.length + 8);
  encoded.writeString(payload);
  return emit(topic, encoded.bytes());
}
