package wasmext

// ABI v1 constants, written by hand from abi/abi.toml (the table every SDK
// follows). abi_test.go compares each of them with abi.toml, so a change
// there fails the Go SDK's tests until this file follows.

// The ABI version this SDK implements.
const (
	ABIMajor = 1
	ABIMinor = 3
)

// AnswerRegionSince is the minor that gave the registration map's
// "answer_region" its meaning (SPEC 1.4.1).
const AnswerRegionSince = 3

// answerAreaSize is how many bytes of answer the SDK's answer region holds.
const answerAreaSize = 1024

// LogLevel is the level of a log line (the log import and the "log" op).
type LogLevel int32

const (
	LogTrace LogLevel = 0
	LogDebug LogLevel = 1
	LogInfo  LogLevel = 2
	LogWarn  LogLevel = 3
	LogError LogLevel = 4
)

// Error codes carried as error.code in responses and host_call answers
// (SPEC 4.4). CodeUnhandled and CodeFailed are the ones only guests use.
const (
	CodeUnsupported = "unsupported"
	CodeDenied      = "denied"
	CodeInvalid     = "invalid"
	CodeNotFound    = "not_found"
	CodeLimit       = "limit"
	CodeConflict    = "conflict"
	CodeTimeout     = "timeout"
	CodeUnavailable = "unavailable"
	CodeInternal    = "internal"
	CodeUnhandled   = "unhandled"
	CodeFailed      = "failed"
)

// ErrorCodes lists every code, in the order of abi.toml.
var ErrorCodes = []string{
	CodeUnsupported, CodeDenied, CodeInvalid, CodeNotFound, CodeLimit, CodeConflict,
	CodeTimeout, CodeUnavailable, CodeInternal, CodeUnhandled, CodeFailed,
}

// host_call ops (SPEC 4.3).
const (
	OpLog           = "log"
	OpConfigGet     = "config.get"
	OpABIInfo       = "abi.info"
	OpSecretGet     = "secret.get"
	OpStateGet      = "state.get"
	OpStateSet      = "state.set"
	OpStateDelete   = "state.delete"
	OpStateKeys     = "state.keys"
	OpStateClear    = "state.clear"
	OpStateCAS      = "state.cas"
	OpEventEmit     = "event.emit"
	OpToolCall      = "tool.call"
	OpNext          = "next"
	OpHTTPFetch     = "http.fetch"
	OpLLMComplete   = "llm.complete"
	OpAgentsRequest = "agents.request"
	OpAgentsSend    = "agents.send"
	OpProgress      = "progress"
	OpResourceList  = "resource.list"
	OpResourceRead  = "resource.read"
	OpPromptList    = "prompt.list"
	OpPromptGet     = "prompt.get"
	OpMetricAdd     = "metric.add"
	OpMetricSet     = "metric.set"
	OpMetricObserve = "metric.observe"
	OpToolRegister  = "tool.register"
)

// OpInfo describes one host_call op as abi.toml does.
type OpInfo struct {
	Op         string
	Capability string // the grant it needs; "" = always allowed
	Since      int    // the ABI minor that introduced it
	Reserved   bool   // listed but not implemented yet (answers unsupported)
}

// Ops lists every op of ABI v1, in the order of abi.toml.
var Ops = []OpInfo{
	{OpLog, "", 0, false},
	{OpConfigGet, "", 0, false},
	{OpABIInfo, "", 0, false},
	{OpSecretGet, "secrets", 0, false},
	{OpStateGet, "state", 0, false},
	{OpStateSet, "state", 0, false},
	{OpStateDelete, "state", 0, false},
	{OpStateKeys, "state", 0, false},
	{OpStateClear, "state", 0, false},
	{OpStateCAS, "state", 0, false},
	{OpEventEmit, "events", 0, false},
	{OpToolCall, "tools", 0, false},
	{OpNext, "", 0, false},
	{OpHTTPFetch, "http", 1, false},
	{OpLLMComplete, "llm", 1, false},
	{OpAgentsRequest, "agents", 1, false},
	{OpAgentsSend, "agents", 1, false},
	{OpProgress, "", 1, false},
	{OpResourceList, "resources", 1, false},
	{OpResourceRead, "resources", 1, false},
	{OpPromptList, "prompts", 1, false},
	{OpPromptGet, "prompts", 1, false},
	{OpMetricAdd, "", 2, false},
	{OpMetricSet, "", 2, false},
	{OpMetricObserve, "", 2, false},
	{OpToolRegister, "", 2, false},
}

// Default limits (SPEC 5); a plugin's manifest or the host may change them.
const (
	LimitFuelPerCall         = 50_000_000
	LimitMemoryBytes         = 67_108_864
	LimitTableElements       = 100_000
	LimitTimeoutMS           = 1000
	LimitMaxInputBytes       = 1_048_576
	LimitMaxOutputBytes      = 1_048_576
	LimitMaxHostCalls        = 1000
	LimitHostCallTimeoutMS   = 1000
	LimitMaxHostRequestBytes = 262_144
	LimitMaxMsgpackDepth     = 64
	LimitMaxWasmStackBytes   = 524_288
	LimitMaxLogLineBytes     = 2048
	LimitMaxLogLines         = 1000
)
