// Hook "greet": data is a name; the reply is "<greeting>, <name>!".
package main

import "wasmext.dev/wasmext"

type Hello struct{ wasmext.Base }

func (Hello) Info() wasmext.Info { return wasmext.Info{Name: "hello", Version: "0.1.0"} }

func (h Hello) Hooks() []wasmext.Hook { return []wasmext.Hook{wasmext.On("greet", h.Greet)} }

func (Hello) Greet(c *wasmext.Call) wasmext.Reply {
	who, err := c.DataString()
	if err != nil {
		return wasmext.Fail(wasmext.CodeInvalid, "greet expects a string")
	}

	// The host answers with the manifest default; "Hello" covers a host
	// that has no value at all (not_found).
	greeting := "Hello"
	if answer := wasmext.ConfigGet("greeting"); answer.OK {
		if greeting, err = answer.ValueString(); err != nil {
			return wasmext.Fail(wasmext.CodeInvalid, "the greeting setting is not a string")
		}
	} else if !answer.Is(wasmext.CodeNotFound) {
		return answer.Fail()
	}

	text := greeting + ", " + who + "!"
	wasmext.Log(wasmext.LogInfo, text)
	return c.ReturnString(text)
}

func init() { wasmext.Register(Hello{}) }

func main() {}
