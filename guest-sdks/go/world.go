package wasmext

import "wasmext.dev/wasmext/msgpack"

// Typed wrappers for the ops beyond config/secret: state.* and event.emit
// (minor 0), http.fetch, llm.complete, agents.request and agents.send (minor
// 1), tool.register (minor 2). Like every wrapper they go through HostOp, which answers unsupported
// locally when the host announced a minor below the op's (SPEC 3.1).

// Scope says where a state op reads and writes: ScopeSession ("", the default
// in every SDK and the host: this session's value) or ScopePlugin (shared by
// the plugin's sessions; the only scope a call outside a session may use).
type Scope string

const (
	ScopeSession Scope = ""
	ScopePlugin  Scope = "plugin"
)

func stateArgs(scope Scope, args map[string]any) map[string]any {
	if scope != ScopeSession {
		args["scope"] = string(scope)
	}
	return args
}

// StateGet sends state.get (grant "state"): the answer's value is the stored
// value; a missing key answers not_found.
func StateGet(key string, scope Scope) Answer {
	return HostOp(OpStateGet, stateArgs(scope, map[string]any{"key": key}))
}

// StateSet sends state.set (grant "state") of any value the msgpack package
// encodes; ttlSeconds 0 leaves the expiry to the host.
func StateSet(key string, value any, scope Scope, ttlSeconds int) Answer {
	args := map[string]any{"key": key, "value": value}
	if ttlSeconds > 0 {
		args["ttl"] = ttlSeconds
	}
	return HostOp(OpStateSet, stateArgs(scope, args))
}

// StateDelete sends state.delete (grant "state"): the answer's value is
// whether the key existed.
func StateDelete(key string, scope Scope) Answer {
	return HostOp(OpStateDelete, stateArgs(scope, map[string]any{"key": key}))
}

// StateKeys sends state.keys (grant "state"; prefix "" = every key): the
// answer's value is an array of key strings.
func StateKeys(prefix string, scope Scope) Answer {
	args := map[string]any{}
	if prefix != "" {
		args["prefix"] = prefix
	}
	return HostOp(OpStateKeys, stateArgs(scope, args))
}

// Emit sends event.emit (grants "events" and "emit:<pattern>") with any
// payload the msgpack package encodes; the answer's value is how many
// subscribers it reached.
func Emit(topic string, payload any) Answer {
	return HostOp(OpEventEmit, map[string]any{"topic": topic, "payload": payload})
}

// HTTPFetch sends http.fetch (grants "http" and "http:<host pattern>"):
// method ("" = GET), url, extra headers (nil = none) and body (nil = none).
// The answer's value is {status, headers, body, url}.
func HTTPFetch(method, url string, headers map[string]string, body []byte) Answer {
	if method == "" {
		method = "GET"
	}
	args := map[string]any{"url": url, "method": method}
	if len(headers) > 0 {
		args["headers"] = headers
	}
	if body != nil {
		args["body"] = body
	}
	return HostOp(OpHTTPFetch, args)
}

// Completion is one llm.complete request. Zero fields are left to the host:
// no system message, the host's model, its max_tokens; Temperature is sent
// only when SetTemperature is true.
type Completion struct {
	System         string
	Prompt         string
	Model          string
	MaxTokens      int
	Temperature    float64
	SetTemperature bool
	// JSONMode asks the model for a JSON object (reference 003's
	// call_llm(json_mode=True)).
	JSONMode bool
}

// LLMComplete sends llm.complete (grant "llm"). The answer's value is
// {text, finish_reason, model, usage: {input, output}, cost}.
func LLMComplete(c Completion) Answer {
	messages := []any{}
	if c.System != "" {
		messages = append(messages, map[string]any{"role": "system", "content": c.System})
	}
	messages = append(messages, map[string]any{"role": "user", "content": c.Prompt})
	args := map[string]any{"messages": messages}
	if c.Model != "" {
		args["model"] = c.Model
	}
	if c.MaxTokens > 0 {
		args["max_tokens"] = c.MaxTokens
	}
	if c.SetTemperature {
		args["temperature"] = c.Temperature
	}
	if c.JSONMode {
		args["json_mode"] = true
	}
	return HostOp(OpLLMComplete, args)
}

// AgentsRequest sends agents.request (grants "agents" and "agents:<pattern>";
// turn and step middleware only): input is one encoded MessagePack value,
// timeoutMS 0 = the host's 15 s. The answer's value is the agent's answer.
func AgentsRequest(agent string, input msgpack.Raw, timeoutMS int) Answer {
	args := map[string]any{"agent": agent, "input": input}
	if timeoutMS > 0 {
		args["timeout_ms"] = timeoutMS
	}
	return HostOp(OpAgentsRequest, args)
}

// AgentsSend sends agents.send: AgentsRequest without waiting for the answer.
func AgentsSend(agent string, input msgpack.Raw) Answer {
	return HostOp(OpAgentsSend, map[string]any{"agent": agent, "input": input})
}

// ToolRegister sends tool.register (ABI minor 2): add or replace one of this
// plugin's own tools after load, served by its on_tool hook. description ""
// = none; inputSchema nil = {"type": "object"}, else one encoded MessagePack
// map. The answer's value is {name: "<plugin>__<name>", replaced}; a broken
// name or schema is invalid, a cap (tools per plugin, schema size) limit.
func ToolRegister(name, description string, inputSchema msgpack.Raw) Answer {
	args := map[string]any{"name": name}
	if description != "" {
		args["description"] = description
	}
	if inputSchema != nil {
		args["input_schema"] = inputSchema
	}
	return HostOp(OpToolRegister, args)
}
