// Conformance plugin: each hook exercises one part of the SDK so that the
// cross-SDK test suite can compare every SDK's behaviour byte for byte.
import {
  Answer, Bytes, Call, Completion, ErrorCode, LogLevel, Reply, Type, agentsRequest, agentsSend,
  configGet, definePlugin, emitString, hostCall, httpFetch, llmComplete, logBytes, stateGet,
  stateSetString,
} from "@wasmext/as-sdk";
export * from "@wasmext/as-sdk/exports";

// Re-encoding through the reader and writer (not a byte copy) proves every
// width decodes and re-encodes canonically.
function echo(call: Call): Reply {
  if (!call.out.copyValue(call.data)) return call.fail(ErrorCode.INVALID, "data could not be decoded");
  return Reply.VALUE;
}

// data = key -> the setting's value; host errors are passed on unchanged.
function config(call: Call): Reply {
  const key = call.dataString();
  if (key === null) return call.fail(ErrorCode.INVALID, "config expects a string key");
  const answer = configGet(key);
  if (!answer.ok) return call.failWith(answer);
  return call.returnRaw(answer.valueBytes);
}

// data = text -> one info line through the direct `log` import; value nil.
function log(call: Call): Reply {
  const r = call.data.clone();
  const text = r.readStr(); // a view of the request's bytes: logged without a copy
  if (!r.ok) return call.fail(ErrorCode.INVALID, "log expects a string");
  logBytes(LogLevel.INFO, text);
  call.out.writeNil();
  return Reply.VALUE;
}

// data = a request map, sent as-is; the value is the host's whole answer,
// failures included, so the suite can check every host_call verdict.
function host(call: Call): Reply {
  if (call.data.peekType() != Type.MAP) return call.fail(ErrorCode.INVALID, "host expects a request map");
  const answer = hostCall(call.data.clone().readRaw());
  return call.returnRaw(answer.raw);
}

// data = up to 8 request maps, all sent before any answer is read; the value
// is the array of the host's answers: each must outlive the host calls after
// it, wherever the host wrote it (the answer region of minor 3).
function hosts(call: Call): Reply {
  const data = call.data.clone();
  if (data.peekType() != Type.ARRAY) return call.fail(ErrorCode.INVALID, "hosts expects request maps");
  const n = data.readArray();
  if (n > 8) return call.fail(ErrorCode.INVALID, "hosts expects up to 8 request maps");
  const answers = new Array<Answer>();
  for (let i: u32 = 0; i < n; i++) answers.push(hostCall(data.readRaw()));
  call.out.writeArray(n);
  for (let i = 0; i < answers.length; i++) call.out.writeRaw(answers[i].raw);
  return Reply.VALUE;
}

function fail(call: Call): Reply {
  const message = call.dataString();
  if (message === null) return call.fail(ErrorCode.INVALID, "fail expects a string message");
  return call.fail(ErrorCode.FAILED, message);
}

function unchanged(call: Call): Reply {
  return Reply.UNCHANGED;
}

function stop(call: Call): Reply {
  if (!call.out.copyValue(call.data)) return call.fail(ErrorCode.INVALID, "data could not be read");
  return Reply.STOP;
}

// The minor-1 wrappers reply with the host's whole answer map, like `host`.
function whole(call: Call, answer: Answer): Reply {
  return call.returnRaw(answer.raw);
}

// data = url -> http.fetch GET.
function fetch(call: Call): Reply {
  const url = call.dataString();
  if (url === null) return call.fail(ErrorCode.INVALID, "fetch expects a url");
  return whole(call, httpFetch("GET", url));
}

// data = prompt -> llm.complete with max_tokens 50.
function llm(call: Call): Reply {
  const prompt = call.dataString();
  if (prompt === null) return call.fail(ErrorCode.INVALID, "llm expects a prompt");
  const c = new Completion();
  c.prompt = prompt;
  c.maxTokens = 50;
  return whole(call, llmComplete(c));
}

// data = key -> state.set of "v:<key>", then state.get of it (session scope).
function remember(call: Call): Reply {
  const key = call.dataString();
  if (key === null) return call.fail(ErrorCode.INVALID, "remember expects a key");
  const stored = stateSetString(key, "v:" + key);
  if (!stored.ok) return whole(call, stored);
  return whole(call, stateGet(key));
}

// data = topic -> event.emit with the payload "hi".
function announce(call: Call): Reply {
  const topic = call.dataString();
  if (topic === null) return call.fail(ErrorCode.INVALID, "announce expects a topic");
  return whole(call, emitString(topic, "hi"));
}

function ping(): Bytes {
  const b = new Uint8Array(5);
  b[0] = 0xa4; b[1] = 0x70; b[2] = 0x69; b[3] = 0x6e; b[4] = 0x67; // "ping"
  return Bytes.fromUint8Array(b);
}

// data = agent -> agents.request with input "ping".
function turn(call: Call): Reply {
  const agent = call.dataString();
  if (agent === null) return call.fail(ErrorCode.INVALID, "turn expects an agent name");
  return whole(call, agentsRequest(agent, ping()));
}

// data = agent -> agents.send with input "ping".
function step(call: Call): Reply {
  const agent = call.dataString();
  if (agent === null) return call.fail(ErrorCode.INVALID, "step expects an agent name");
  return whole(call, agentsSend(agent, ping()));
}

definePlugin("assemblyscript-conformance", "0.1.0")
  .hook("echo", echo)
  .hook("config", config)
  .hook("log", log)
  .hook("host", host)
  .hook("hosts", hosts)
  .hook("fail", fail)
  .hook("unchanged", unchanged)
  .hook("stop", stop)
  .hook("fetch", fetch)
  .hook("llm", llm)
  .hook("turn", turn)
  .hook("step", step)
  .hook("remember", remember)
  .hook("announce", announce);
