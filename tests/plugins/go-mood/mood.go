// #mood asks the host's model in JSON mode, #plain without it; each answers the
// model's text, so a test sees what the Go SDK sent.
package main

import "wasmext.dev/wasmext"

type Mood struct{ wasmext.Base }

func (Mood) Info() wasmext.Info { return wasmext.Info{Name: "go-mood", Version: "0.1.0"} }

func (m Mood) Hooks() []wasmext.Hook {
	return []wasmext.Hook{
		wasmext.On("output_extension", func(c *wasmext.Call) wasmext.Reply { return ask(c, true) }).WithPattern("mood"),
		wasmext.On("output_extension", func(c *wasmext.Call) wasmext.Reply { return ask(c, false) }).WithPattern("plain"),
	}
}

func ask(c *wasmext.Call, jsonMode bool) wasmext.Reply {
	data, err := c.DataDecode()
	fields, isMap := data.(map[string]any)
	answer, isText := fields["answer"].(string)
	if err != nil || !isMap || !isText {
		return wasmext.Fail(wasmext.CodeInvalid, "output_extension data needs an answer")
	}
	completion := wasmext.Completion{Prompt: answer, MaxTokens: 64}
	if jsonMode {
		completion.System = "Rate the mood as JSON."
		completion.SetTemperature = true
		completion.JSONMode = true
	}
	reply := wasmext.LLMComplete(completion)
	if !reply.OK {
		return reply.Fail()
	}
	value, err := reply.Decode()
	got, isMap := value.(map[string]any)
	text, isText := got["text"].(string)
	if err != nil || !isMap || !isText {
		return wasmext.Fail(wasmext.CodeInvalid, "the answer has no text")
	}
	return c.ReturnString(text)
}

func init() { wasmext.Register(Mood{}) }

func main() {}
