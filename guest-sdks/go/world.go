package wasmext

import "wasmext.dev/wasmext/msgpack"

// Wrappers for the ops of ABI minor 1 (SPEC 4.5). Like every wrapper they go
// through HostOp, which answers unsupported locally when the host announced a
// minor below 1 (SPEC 3.1).

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
