// Conformance plugin: each hook exercises one part of the SDK so that the
// cross-SDK test suite can compare every SDK's behaviour (see tests/sdks).
import { Fail, HostError, Plugin, Stop, UNCHANGED, agentsRequest, agentsSend, config,
  definePlugin, emit, hook, httpFetch, llmComplete, log, pack, progress, promptGet, promptList, request,
  resourceList, resourceRead, stateGet, stateSet, unpack } from "wasmext";

const str = (v, what) => {
  if (typeof v !== "string") throw new Fail("invalid", what);
  return v;
};

// Minor 1, through the wrappers: the host's whole answer map, failures included.
const whole = (ask) => {
  try {
    return { ok: true, value: ask() };
  } catch (e) {
    if (e instanceof HostError) return { ok: false, error: { code: e.code, message: e.detail } };
    throw e;
  }
};

class Conformance extends Plugin {
  info() { return { name: "javascript-conformance", version: "0.1.0" }; }

  hooks() {
    return [
      // The call's own reader and writer carry every value: MessagePack's every width,
      // or JSON when the host sent the request as JSON (abi/SPEC.md section 8).
      hook("echo", (data) => data),
      // Through the SDK's MessagePack writer and reader once more, inside the handler.
      hook("repack", (data) => unpack(pack(data))),
      hook("config", (key) => config(str(key, "config expects a string key"))),
      hook("log", (text) => { log(str(text, "log expects a string")); return null; }),
      hook("host", (req) => {
        if (req === null || typeof req !== "object" || Array.isArray(req)) {
          throw new Fail("invalid", "host expects a request map");
        }
        return request(req); // the host's whole answer, failures included
      }),
      hook("fetch", (url) => whole(() => httpFetch(String(url)))),
      hook("llm", (prompt) => whole(() => llmComplete(String(prompt), { maxTokens: 50 }))),
      hook("remember", (key) => whole(() => {
        stateSet(String(key), `v:${key}`);
        return stateGet(String(key));
      })),
      hook("announce", (topic) => whole(() => emit(String(topic), "hi"))),
      hook("turn", (agent) => whole(() => agentsRequest(String(agent), "ping"))),
      hook("step", (agent) => whole(() => agentsSend(String(agent), "ping"))),
      hook("mcp", (req) => {
        const wrappers = {
          "resource.list": () => resourceList(req.server),
          "resource.read": () => resourceRead(req.server, req.uri),
          "prompt.list": () => promptList(req.server),
          "prompt.get": () => promptGet(req.server, req.name, req.args),
          "progress": () => progress(req.progress, req.total, req.message),
        };
        if (req === null || typeof req !== "object" || !(req.op in wrappers)) {
          throw new Fail("invalid", "mcp: an op of resource.*, prompt.* or progress");
        }
        return whole(wrappers[req.op]);
      }),
      hook("fail", (message) => { throw new Fail("failed", str(message, "fail expects a string message")); }),
      hook("unchanged", () => UNCHANGED),
      hook("stop", (data) => new Stop(data)),
    ];
  }
}

export const { register, call } = definePlugin(new Conformance());
