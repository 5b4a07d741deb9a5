// Conformance hooks: every SDK implements the same seven, so one Python
// suite can check each SDK's MessagePack, memory handling and envelopes.
package main

import (
	"wasmext.dev/wasmext"
	"wasmext.dev/wasmext/msgpack"
)

type Conformance struct{ wasmext.Base }

func (Conformance) Info() wasmext.Info {
	return wasmext.Info{Name: "go-conformance", Version: "0.1.0"}
}

func (Conformance) Hooks() []wasmext.Hook {
	return []wasmext.Hook{
		wasmext.On("echo", echo),
		wasmext.On("config", config),
		wasmext.On("log", logHook),
		wasmext.On("host", host),
		wasmext.On("hosts", hosts),
		wasmext.On("fail", fail),
		wasmext.On("unchanged", nil), // registered, always unchanged
		wasmext.On("stop", stop),
		wasmext.On("fetch", fetch),
		wasmext.On("llm", llm),
		wasmext.On("turn", turn),
		wasmext.On("step", step),
		wasmext.On("remember", remember),
		wasmext.On("announce", announce),
	}
}

// echo decodes the data token by token and writes it again with the SDK
// writer (not a byte copy), so the reply is the canonical encoding.
func echo(c *wasmext.Call) wasmext.Reply {
	if err := c.Out.CopyValue(&c.Data); err != nil {
		return wasmext.FailError(err)
	}
	return wasmext.Value
}

// config: data is a setting name; the reply is its value, or the host's
// refusal (such as not_found) as the hook's error.
func config(c *wasmext.Call) wasmext.Reply {
	key, err := c.DataString()
	if err != nil {
		return wasmext.Fail(wasmext.CodeInvalid, "config expects a string key")
	}
	answer := wasmext.ConfigGet(key)
	if !answer.OK {
		return answer.Fail()
	}
	c.Out.WriteRaw(answer.Value)
	return wasmext.Value
}

// logHook: data is text, logged at info through the log import; value nil.
func logHook(c *wasmext.Call) wasmext.Reply {
	text, err := c.DataString()
	if err != nil {
		return wasmext.Fail(wasmext.CodeInvalid, "log expects a string")
	}
	wasmext.Log(wasmext.LogInfo, text)
	return c.Return(nil)
}

// host: data is a request map, sent as-is; the value is the host's whole
// answer map, failures included.
// hosts sends up to 8 request maps before reading any answer and replies
// with the array of the host's answers: each must outlive the host calls
// after it, wherever the host wrote it (the answer region of minor 3).
func hosts(c *wasmext.Call) wasmext.Reply {
	n, err := c.Data.ReadArrayLen()
	if err != nil || n > 8 {
		return wasmext.Fail(wasmext.CodeInvalid, "hosts expects up to 8 request maps")
	}
	answers := make([]wasmext.Answer, 0, n)
	for i := 0; i < n; i++ {
		request, err := c.Data.Raw()
		if err != nil {
			return wasmext.FailError(err)
		}
		answers = append(answers, wasmext.HostCall(request))
	}
	c.Out.WriteArrayHeader(len(answers))
	for _, a := range answers {
		c.Out.WriteRaw(a.Raw)
	}
	return wasmext.Value
}

func host(c *wasmext.Call) wasmext.Reply {
	if kind, _ := c.Data.PeekKind(); kind != msgpack.Map {
		return wasmext.Fail(wasmext.CodeInvalid, "host expects a request map")
	}
	request, err := c.Data.Raw()
	if err != nil {
		return wasmext.FailError(err)
	}
	c.Out.WriteRaw(wasmext.HostCall(request).Raw)
	return wasmext.Value
}

// fail: data is text; the reply is the error {"code": "failed", "message": data}.
func fail(c *wasmext.Call) wasmext.Reply {
	message, err := c.DataString()
	if err != nil {
		return wasmext.Fail(wasmext.CodeInvalid, "fail expects a string message")
	}
	return wasmext.Fail(wasmext.CodeFailed, message)
}

// stop replies with the data and asks the host to stop the chain.
func stop(c *wasmext.Call) wasmext.Reply {
	if err := c.Out.CopyValue(&c.Data); err != nil {
		return wasmext.FailError(err)
	}
	return wasmext.Stop
}

// The minor-1 wrappers reply with the host's whole answer map, like host.
func whole(c *wasmext.Call, a wasmext.Answer) wasmext.Reply {
	c.Out.WriteRaw(a.Raw)
	return wasmext.Value
}

var ping = msgpack.Raw{0xa4, 'p', 'i', 'n', 'g'}

// fetch: data is a url; http.fetch GET.
func fetch(c *wasmext.Call) wasmext.Reply {
	url, err := c.DataString()
	if err != nil {
		return wasmext.Fail(wasmext.CodeInvalid, "fetch expects a url")
	}
	return whole(c, wasmext.HTTPFetch("GET", url, nil, nil))
}

// llm: data is a prompt; llm.complete with max_tokens 50.
func llm(c *wasmext.Call) wasmext.Reply {
	prompt, err := c.DataString()
	if err != nil {
		return wasmext.Fail(wasmext.CodeInvalid, "llm expects a prompt")
	}
	return whole(c, wasmext.LLMComplete(wasmext.Completion{Prompt: prompt, MaxTokens: 50}))
}

// turn: data is an agent name; agents.request with input "ping".
func turn(c *wasmext.Call) wasmext.Reply {
	agent, err := c.DataString()
	if err != nil {
		return wasmext.Fail(wasmext.CodeInvalid, "turn expects an agent name")
	}
	return whole(c, wasmext.AgentsRequest(agent, ping, 0))
}

// step: data is an agent name; agents.send with input "ping".
func step(c *wasmext.Call) wasmext.Reply {
	agent, err := c.DataString()
	if err != nil {
		return wasmext.Fail(wasmext.CodeInvalid, "step expects an agent name")
	}
	return whole(c, wasmext.AgentsSend(agent, ping))
}

func init() { wasmext.Register(Conformance{}) }

func main() {}

// remember: data is a key; state.set of "v:<key>", then state.get of it
// (session scope).
func remember(c *wasmext.Call) wasmext.Reply {
	key, err := c.DataString()
	if err != nil {
		return wasmext.Fail(wasmext.CodeInvalid, "remember expects a key")
	}
	if stored := wasmext.StateSet(key, "v:"+key, wasmext.ScopeSession, 0); !stored.OK {
		return whole(c, stored)
	}
	return whole(c, wasmext.StateGet(key, wasmext.ScopeSession))
}

// announce: data is a topic; event.emit with the payload "hi".
func announce(c *wasmext.Call) wasmext.Reply {
	topic, err := c.DataString()
	if err != nil {
		return wasmext.Fail(wasmext.CodeInvalid, "announce expects a topic")
	}
	return whole(c, wasmext.Emit(topic, "hi"))
}
