// Wrappers for the ops of ABI minor 1 (SPEC 4.5): http.fetch, llm.complete,
// agents.request and agents.send. Each answers `unsupported` locally when the
// host announced a minor below 1 (SPEC 3.1).
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
  const extra = (c.model.length > 0 ? 1 : 0) + (c.maxTokens > 0 ? 1 : 0) + (c.temperature >= 0 ? 1 : 0);
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
