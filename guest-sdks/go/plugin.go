// Package wasmext is the Go guest SDK for wasmext plugins (ABI v1,
// abi/SPEC.md).
//
// A plugin is a type that embeds Base and lists its hooks, registered from
// an init function; package main also needs an empty main:
//
//	type Hello struct{ wasmext.Base }
//
//	func (Hello) Info() wasmext.Info { return wasmext.Info{Name: "hello", Version: "0.1.0"} }
//	func (h Hello) Hooks() []wasmext.Hook { return []wasmext.Hook{wasmext.On("greet", h.Greet)} }
//	func (Hello) Greet(c *wasmext.Call) wasmext.Reply { ... }
//
//	func init() { wasmext.Register(Hello{}) }
//	func main() {}
//
// The SDK defines every export of the ABI (wasmext_abi_version,
// wasmext_alloc, wasmext_free, wasmext_register, wasmext_call), decodes
// requests, encodes responses and manages the memory the host and the guest
// hand each other. Build with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared
// (what `wasmext build` does): a WASI reactor.
//
// The three layers: package raw (the imports as declared), package msgpack
// and the host services of this package (HostCall, HostOp, ConfigGet,
// SecretGet, Log), and the plugin interface (Plugin, Base, Hook, Call,
// Reply, Register).
package wasmext

import (
	"wasmext.dev/wasmext/msgpack"
)

// Info names the plugin in the registration map; empty fields are left out.
type Info struct {
	Name    string
	Version string
}

// Plugin is what a plugin implements. Embed Base to get a default for every
// method, then override the ones you need: usually Info and Hooks.
type Plugin interface {
	// Info names the plugin (Base: nothing).
	Info() Info
	// Hooks lists the hooks to register, each with its handler (Base: none).
	// A call of a hook not listed answers "unhandled". The SDK calls it once,
	// at registration.
	Hooks() []Hook
	// Extra writes extra registration entries, such as "prompt" or
	// "tool_guidance" (docs/hooks.md), as key/value pairs and returns how
	// many pairs it wrote (Base: none).
	Extra(w *msgpack.Writer) int
}

// Base gives a Plugin the do-nothing default of every method.
type Base struct{}

// Info leaves name and version out of the registration map.
func (Base) Info() Info { return Info{} }

// Hooks registers no hooks.
func (Base) Hooks() []Hook { return nil }

// Extra writes no extra registration entries.
func (Base) Extra(*msgpack.Writer) int { return 0 }

// Handler handles one hook call.
type Handler func(c *Call) Reply

// Hook is one entry of the registration map's "hooks" array with its handler.
// Write them with On and, where needed, WithPriority and WithPattern.
type Hook struct {
	// Name is the hook name, such as "on_plain_text".
	Name string
	// Handler handles the calls; nil registers the hook and answers
	// every call with "unchanged".
	Handler Handler
	// Pattern is the tag pattern of an on_tag hook (or the extension name of
	// an output_extension hook): an exact name or a prefix ending in '*'.
	// The SDK dispatches a call to the first entry of the hook whose
	// pattern matches the data's "tag" (or "name"). "" = no pattern.
	Pattern string
	// priority+1; 0 leaves it to the manifest (SPEC 3).
	priority int
}

// On registers handler for the hook name.
func On(name string, handler Handler) Hook { return Hook{Name: name, Handler: handler} }

// WithPriority sets the hook's priority, 0..100 (higher runs earlier). Without
// it the registration leaves "priority" out and the host uses the manifest's.
// A priority outside 0..100 panics.
func (h Hook) WithPriority(p int) Hook {
	if p < 0 || p > 100 {
		panic("wasmext: hook " + h.Name + ": priority must be 0..100")
	}
	h.priority = p + 1
	return h
}

// WithPattern sets the hook's tag pattern (see Hook.Pattern).
func (h Hook) WithPattern(pattern string) Hook {
	h.Pattern = pattern
	return h
}

// Priority returns the hook's priority and whether one was set.
func (h Hook) Priority() (int, bool) { return h.priority - 1, h.priority > 0 }

// Call is one hook call as a handler sees it. Data and Meta are views into
// the request, valid until the handler returns: copy what you keep (Go
// strings from ReadString already are copies).
type Call struct {
	// Hook is the hook name.
	Hook string
	// Data is a reader on the request's "data" (a nil when absent).
	Data msgpack.Reader
	// Meta is a reader on the request's "meta" (a nil when absent).
	Meta msgpack.Reader
	// Out takes the reply value: write exactly one value, then return
	// Value or Stop. It starts empty on every call.
	Out *msgpack.Writer
}

// DataString returns the data as a string (msgpack.ErrType if it is not one).
func (c *Call) DataString() (string, error) {
	r := c.Data
	return r.ReadString()
}

// DataDecode returns the data as Go values (see msgpack.Reader.Decode).
func (c *Call) DataDecode() (any, error) {
	r := c.Data
	return r.Decode()
}

// ReturnString writes s as the reply value: `return c.ReturnString(s)`.
func (c *Call) ReturnString(s string) Reply {
	c.Out.WriteString(s)
	return Value
}

// Return writes a Go value (what msgpack.Writer.WriteValue accepts) as the
// reply value: `return c.Return(v)`.
func (c *Call) Return(v any) Reply {
	_ = c.Out.WriteValue(v) // an error is sticky: the SDK answers "failed"
	return Value
}

// Reply is what a handler answers. The zero Reply is Unchanged.
type Reply struct {
	kind    replyKind
	code    string
	message string
}

type replyKind uint8

const (
	replyUnchanged replyKind = iota
	replyValue
	replyStop
	replyFail
)

var (
	// Unchanged answers {"ok": true}: the host passes the input on.
	Unchanged = Reply{kind: replyUnchanged}
	// Value answers {"ok": true, "value": v} with v the one value written to Call.Out.
	Value = Reply{kind: replyValue}
	// Stop answers like Value plus "stop": true (without a written value:
	// {"ok": true, "stop": true}, unchanged and stop the chain).
	Stop = Reply{kind: replyStop}
)

// Fail answers {"ok": false, "error": {"code": code, "message": message}};
// code is one of the Code* constants (usually CodeFailed or CodeInvalid).
// An empty message is left out.
func Fail(code, message string) Reply {
	return Reply{kind: replyFail, code: code, message: message}
}

// FailError answers an error: an *Error keeps its code, a msgpack read error
// (the data had the wrong shape) is "invalid", anything else is "failed"
// with the error's text as the message.
func FailError(err error) Reply {
	switch e := err.(type) {
	case nil:
		return Fail(CodeFailed, "")
	case *Error:
		return Fail(e.Code, e.Message)
	}
	switch err {
	case msgpack.ErrType, msgpack.ErrRange, msgpack.ErrTruncated, msgpack.ErrDepth,
		msgpack.ErrExt, msgpack.ErrReserved, msgpack.ErrKey, msgpack.ErrTrailing,
		msgpack.ErrUTF8, msgpack.ErrNotFound:
		return Fail(CodeInvalid, err.Error())
	}
	return Fail(CodeFailed, err.Error())
}

// The registered plugin.
var (
	plugin Plugin
	hooks  []Hook
)

// Register makes p the plugin of this module. Call it once, from an init
// function: `func init() { wasmext.Register(&MyPlugin{}) }`.
func Register(p Plugin) {
	if plugin != nil {
		panic("wasmext: Register called twice")
	}
	if p == nil {
		panic("wasmext: Register(nil)")
	}
	plugin = p
}
