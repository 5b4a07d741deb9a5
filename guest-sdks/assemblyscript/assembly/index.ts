// The wasmext AssemblyScript SDK: everything a plugin imports from
// "@wasmext/as-sdk". The ABI exports themselves come from
// "@wasmext/as-sdk/exports" (one `export *` line in the plugin's entry file).

export { ABI_MAJOR, ABI_MINOR, ErrorCode, ExportName, ImportName, Limits, LogLevel, Op } from "./abi";
export {
  Bytes, MAX_DEPTH, MsgpackError, Reader, Type, Writer, utf8Equals, utf8Valid, validate,
  validateUtf8,
} from "./msgpack";
export {
  Answer, abiInfo, configAll, configGet, hostAbiMinor, hostCall, hostCallRaw, hostCallWriter,
  log, logBytes, pluginId, request, secretGet,
} from "./host";
export {
  Completion, Scope, agentsRequest, agentsSend, emit, emitString, httpFetch, llmComplete,
  stateDelete, stateGet, stateKeys, stateSet, stateSetString,
} from "./world";
export {
  Call, ExtraEntries, Handler, Hook, NO_PRIORITY, PluginDefinition, Reply, definePlugin, plugin,
} from "./plugin";
// Layer 1: the imports as declared (also importable as "@wasmext/as-sdk/assembly/raw").
export { host_call as rawHostCall, log as rawLog, pack, packedLen, packedPtr } from "./raw";
export { wasmextAbort, wasmextConsole, wasmextSeed, wasmextTrace } from "./runtime";
