// The wasmext guest SDK for JavaScript plugins: import everything from "wasmext".
export { MsgpackError, pack, unpack } from "./msgpack.js";
export { LOG_LEVELS } from "./raw.js";
export { HostError, config, emit, hostOp, log, request, secret, stateDelete, stateGet, stateKeys,
  stateSet } from "./host.js";
export { ABI_MINOR, agentsRequest, agentsSend, hostMinor, httpFetch, llmComplete, progress,
  promptGet, promptList, resourceList, resourceRead, toolRegister } from "./world.js";
export { Fail, Plugin, Stop, UNCHANGED, definePlugin, errorResult, hook } from "./plugin.js";
export { RESULT_KEY, countWords, extractCodeBlocks, extractJsonFromText, extractSentences,
  jsonResult, textResult, truncate } from "./helpers.js";
