// Layer 2, ABI minors 1 and 2 (abi/SPEC.md 4.3.1, 4.5 and 4.6): HTTP, the host's model,
// agents, progress, configured MCP servers' resources and prompts, and tools registered
// at runtime. Each function sends one op and returns its value or throws HostError with
// the ABI code. A host that announced a minor below an op's at registration does not
// have it: the SDK answers `unsupported` itself, without asking it (SPEC 3.1).
import { HostError, hostOp } from "./host.js";

export const ABI_MINOR = 2; // the minor this SDK is built against (its registration says so)
let hostMinorSeen = 0;

// Remember the host's minor from the registration request (the SDK calls it).
export function noteRegistration(req) {
  const minor = req && typeof req.abi === "object" && req.abi !== null ? req.abi.minor : undefined;
  hostMinorSeen = Number.isInteger(minor) && minor >= 0 ? minor : 0;
}

export function hostMinor() { return hostMinorSeen; }

function op(name, since, args) {
  if (hostMinorSeen < since) {
    throw new HostError("unsupported", `${name} needs ABI minor ${since}; the host has minor ${hostMinorSeen}`);
  }
  const sent = {};
  for (const [k, v] of Object.entries(args)) if (v !== undefined && v !== null) sent[k] = v;
  return hostOp(name, sent);
}

// `http.fetch` (grants `http`, `http:<host pattern>`): {status, headers, body, url}.
export function httpFetch(url, { method = "GET", headers, body } = {}) {
  return op("http.fetch", 1, { url, method, headers, body });
}

// `llm.complete` (grant `llm`): a prompt (optional system message) or whole `messages`.
// `jsonMode: true` asks the model for a JSON answer (its response_format).
export function llmComplete(prompt, { messages, system, model, maxTokens, temperature,
  jsonMode } = {}) {
  let sent = messages;
  if (sent === undefined) {
    sent = system !== undefined ? [{ role: "system", content: system }] : [];
    sent.push({ role: "user", content: String(prompt ?? "") });
  }
  return op("llm.complete", 1, { messages: sent, model, max_tokens: maxTokens, temperature,
    json_mode: jsonMode ? true : undefined });
}

// `agents.request` (grants `agents`, `agents:<pattern>`; turn and step middleware only).
export function agentsRequest(agent, input, timeoutMs) {
  return op("agents.request", 1, { agent, input, timeout_ms: timeoutMs });
}

// `agents.send`: hand the agent `input` without waiting for an answer.
export function agentsSend(agent, input) { op("agents.send", 1, { agent, input }); return null; }

// `progress` of the tool call in hand (on_tool): true when it was passed on.
export function progress(done, total, message) {
  const answer = op("progress", 1, { progress: done, total, message });
  return Boolean(answer && answer.delivered);
}

// Configured MCP servers (grants `resources:<pattern>`, `prompts:<pattern>`).
export function resourceList(server) { return op("resource.list", 1, { server }); }
export function resourceRead(server, uri) { return op("resource.read", 1, { server, uri }); }
export function promptList(server) { return op("prompt.list", 1, { server }); }
export function promptGet(server, name, args) { return op("prompt.get", 1, { server, name, args }); }

// `tool.register` (ABI minor 2): add or replace one of this plugin's tools after load,
// served by its `on_tool` hook; {name: "<plugin>__<name>", replaced}. A broken name or
// schema throws HostError `invalid`, a cap (tools per plugin, schema size) `limit`.
export function toolRegister(name, { description, inputSchema, outputSchema, title } = {}) {
  return op("tool.register", 2, { name, description, input_schema: inputSchema,
    output_schema: outputSchema, title });
}
