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
		wasmext.On("fail", fail),
		wasmext.On("unchanged", nil), // registered, always unchanged
		wasmext.On("stop", stop),
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

func init() { wasmext.Register(Conformance{}) }

func main() {}
