//go:build !wasip1

package wasmext

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"wasmext.dev/wasmext/msgpack"
)

// Native tests of registration, dispatch and the host wrappers, with a fake
// host (transport_other.go). The plugins themselves run through the real
// host in tests/test_sdk_plugins.py and tests/sdks/test_go_sdk.py.

func encode(t *testing.T, v any) []byte {
	t.Helper()
	var w msgpack.Writer
	if err := w.WriteValue(v); err != nil {
		t.Fatal(err)
	}
	return append([]byte{}, w.Bytes()...)
}

func decode(t *testing.T, b []byte) any {
	t.Helper()
	if err := msgpack.ValidateUTF8(b); err != nil {
		t.Fatalf("%x: %v", b, err)
	}
	r := msgpack.NewReader(b)
	v, err := r.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type testPlugin struct {
	Base
	hooks []Hook
	extra func(w *msgpack.Writer) int
}

func (p *testPlugin) Info() Info    { return Info{Name: "test", Version: "1.2.3"} }
func (p *testPlugin) Hooks() []Hook { return p.hooks }
func (p *testPlugin) Extra(w *msgpack.Writer) int {
	if p.extra == nil {
		return 0
	}
	return p.extra(w)
}

// use installs p as the registered plugin for one test.
func use(t *testing.T, p Plugin) {
	t.Helper()
	old, oldHooks, oldMinor, oldID := plugin, hooks, hostMinor, pluginID
	plugin, hooks = p, nil
	t.Cleanup(func() {
		plugin, hooks, hostMinor, pluginID = old, oldHooks, oldMinor, oldID
		fakeHost, fakeLog = nil, nil
	})
}

func register(t *testing.T) map[string]any {
	t.Helper()
	req := encode(t, map[string]any{
		"abi":      map[string]any{"major": 1, "minor": 3},
		"host":     map[string]any{"name": "wasmext", "version": "0.1.0"},
		"plugin":   map[string]any{"id": "my-plugin"},
		"settings": map[string]any{"greeting": "hi"},
	})
	out := handleRegister(req)
	if out == nil {
		t.Fatal("registration returned nothing")
	}
	return decode(t, out).(map[string]any)
}

func call(t *testing.T, hook string, data any) map[string]any {
	t.Helper()
	out := handleCall(encode(t, map[string]any{"hook": hook, "data": data}))
	return decode(t, out).(map[string]any)
}

func errorOf(t *testing.T, resp map[string]any) (string, string) {
	t.Helper()
	if resp["ok"] != false {
		t.Fatalf("expected an error response, got %#v", resp)
	}
	e := resp["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return e["code"].(string), msg
}

func TestRegistrationMap(t *testing.T) {
	use(t, &testPlugin{
		hooks: []Hook{
			On("on_plain_text", nil),
			On("on_llm_output", nil).WithPriority(90),
			On("on_tag", nil).WithPattern("pii.*").WithPriority(0),
		},
		extra: func(w *msgpack.Writer) int {
			w.WriteString("prompt")
			w.WriteString("be nice")
			return 1
		},
	})
	reg := register(t)
	want := map[string]any{
		"abi_minor": int64(ABIMinor), "name": "test", "version": "1.2.3", "prompt": "be nice",
		"hooks": []any{
			map[string]any{"hook": "on_plain_text"},
			map[string]any{"hook": "on_llm_output", "priority": int64(90)},
			map[string]any{"hook": "on_tag", "priority": int64(0), "pattern": "pii.*"},
		},
	}
	if !reflect.DeepEqual(reg, want) {
		t.Fatalf("registration map %#v", reg)
	}
	if HostABIMinor() != 3 || PluginID() != "my-plugin" {
		t.Fatalf("registration facts: minor %d id %q", HostABIMinor(), PluginID())
	}
}

func TestBadExtraIsLeftOut(t *testing.T) {
	use(t, &testPlugin{
		hooks: []Hook{On("x", nil)},
		extra: func(w *msgpack.Writer) int {
			w.WriteString("prompt")
			w.WriteString("one pair, but two announced")
			return 2
		},
	})
	var logged []string
	fakeLog = func(_ LogLevel, text string) { logged = append(logged, text) }
	reg := register(t)
	if _, ok := reg["prompt"]; ok || len(reg["hooks"].([]any)) != 1 {
		t.Fatalf("registration map %#v", reg)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "Extra") {
		t.Fatalf("log %q", logged)
	}
}

func TestBaseRegistersNothing(t *testing.T) {
	use(t, Base{})
	reg := register(t)
	if !reflect.DeepEqual(reg, map[string]any{"abi_minor": int64(ABIMinor), "hooks": []any{}}) {
		t.Fatalf("registration map %#v", reg)
	}
	code, msg := errorOf(t, call(t, "on_plain_text", "x"))
	if code != CodeUnhandled || !strings.Contains(msg, "on_plain_text") {
		t.Fatal(code, msg)
	}
}

func TestNoPluginRegistered(t *testing.T) {
	use(t, nil)
	var logged []string
	fakeLog = func(_ LogLevel, text string) { logged = append(logged, text) }
	if out := handleRegister(nil); out != nil {
		t.Fatalf("registered without a plugin: %x", out)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "wasmext.Register") {
		t.Fatalf("log %q", logged)
	}
}

func TestPriorityOutOfRangePanics(t *testing.T) {
	for _, p := range []int{-1, 101} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("priority %d accepted", p)
				}
			}()
			On("x", nil).WithPriority(p)
		}()
	}
	if prio, ok := On("x", nil).Priority(); ok || prio != -1 {
		t.Fatal("a hook without priority reports one")
	}
}

func TestReplies(t *testing.T) {
	use(t, &testPlugin{hooks: []Hook{
		On("value", func(c *Call) Reply { return c.Return([]any{"a", int64(1)}) }),
		On("string", func(c *Call) Reply {
			s, err := c.DataString()
			if err != nil {
				return FailError(err)
			}
			return c.ReturnString(strings.ToUpper(s))
		}),
		On("unchanged", func(c *Call) Reply { c.Out.WriteNil(); return Unchanged }),
		On("zero", func(c *Call) Reply { return Reply{} }),
		On("stop", func(c *Call) Reply { c.Out.WriteBool(true); return Stop }),
		On("stop-only", func(c *Call) Reply { return Stop }),
		On("nil", nil),
		On("fail", func(c *Call) Reply { return Fail(CodeFailed, "because") }),
		On("fail-quiet", func(c *Call) Reply { return Fail(CodeConflict, "") }),
		On("reset", func(c *Call) Reply {
			c.Out.WriteString("dropped")
			c.Out.Reset()
			c.Out.WriteInt(7)
			return Value
		}),
		On("meta", func(c *Call) Reply {
			v, err := c.Meta.Decode()
			if err != nil {
				return FailError(err)
			}
			return c.Return(v)
		}),
	}})
	register(t)
	check := func(hook string, data any, want map[string]any) {
		t.Helper()
		if got := call(t, hook, data); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %#v, want %#v", hook, got, want)
		}
	}
	check("value", nil, map[string]any{"ok": true, "value": []any{"a", int64(1)}})
	check("string", "abc", map[string]any{"ok": true, "value": "ABC"})
	check("unchanged", nil, map[string]any{"ok": true})
	check("zero", nil, map[string]any{"ok": true})
	check("nil", "x", map[string]any{"ok": true})
	check("stop", nil, map[string]any{"ok": true, "value": true, "stop": true})
	check("stop-only", nil, map[string]any{"ok": true, "stop": true})
	check("fail", nil, map[string]any{"ok": false,
		"error": map[string]any{"code": "failed", "message": "because"}})
	check("fail-quiet", nil, map[string]any{"ok": false, "error": map[string]any{"code": "conflict"}})
	check("reset", nil, map[string]any{"ok": true, "value": int64(7)})
	check("meta", nil, map[string]any{"ok": true, "value": nil})
	out := handleCall(encode(t, map[string]any{"hook": "meta", "data": 1,
		"meta": map[string]any{"session": "s1", "call": 4}}))
	if got := decode(t, out).(map[string]any)["value"]; !reflect.DeepEqual(got,
		map[string]any{"session": "s1", "call": int64(4)}) {
		t.Errorf("meta: %#v", got)
	}
	if code, _ := errorOf(t, call(t, "string", 5)); code != CodeInvalid {
		t.Errorf("a type error is %q", code)
	}
}

func TestHandlerMistakesBecomeFailed(t *testing.T) {
	var logged []string
	use(t, &testPlugin{hooks: []Hook{
		On("none", func(c *Call) Reply { return Value }),
		On("two", func(c *Call) Reply { c.Out.WriteInt(1); c.Out.WriteInt(2); return Value }),
		On("short", func(c *Call) Reply { c.Out.WriteArrayHeader(2); c.Out.WriteInt(1); return Value }),
		On("utf8", func(c *Call) Reply { return c.ReturnString("\xff") }),
		On("type", func(c *Call) Reply { return c.Return(struct{}{}) }),
		On("panic", func(c *Call) Reply { panic("boom") }),
		On("index", func(c *Call) Reply { var s []int; return c.Return(s[3]) }),
		On("deep", func(c *Call) Reply {
			for i := 0; i < msgpack.MaxDepth; i++ {
				c.Out.WriteArrayHeader(1)
			}
			c.Out.WriteNil()
			return Value
		}),
		On("badmsg", func(c *Call) Reply { return Fail(CodeFailed, "\xff") }),
	}})
	register(t)
	fakeLog = func(_ LogLevel, text string) { logged = append(logged, text) }
	for hook, want := range map[string]string{
		"none": "wrote no value", "two": "not exactly one value", "short": "not exactly one value",
		"utf8": "UTF-8", "type": "type", "panic": "boom", "index": "index out of range",
		"deep": "deeper", "badmsg": "not UTF-8",
	} {
		code, msg := errorOf(t, call(t, hook, nil))
		if code != CodeFailed || !strings.Contains(msg, want) {
			t.Errorf("%s: %s %q", hook, code, msg)
		}
	}
	if len(logged) != 2 || !strings.Contains(logged[0], "panicked") {
		t.Errorf("panics logged as %q", logged)
	}
}

func TestMalformedRequests(t *testing.T) {
	use(t, &testPlugin{hooks: []Hook{On("x", nil)}})
	register(t)
	for name, req := range map[string][]byte{
		"not a map":     encode(t, []any{"hook"}),
		"no hook":       encode(t, map[string]any{"data": 1}),
		"hook not str":  encode(t, map[string]any{"hook": 5}),
		"truncated":     {0x82, 0xa4, 'h', 'o', 'o', 'k', 0xa1, 'x', 0xa4, 'd'},
		"trailing":      append(encode(t, map[string]any{"hook": "x"}), 0xc0),
		"ext in data":   append(encode(t, map[string]any{"hook": "x"})[:0:0], 0x82, 0xa4, 'h', 'o', 'o', 'k', 0xa1, 'x', 0xa4, 'd', 'a', 't', 'a', 0xd4, 1, 1),
		"non-str key":   {0x82, 0xa4, 'h', 'o', 'o', 'k', 0xa1, 'x', 0x01, 0xc0},
		"empty request": {},
	} {
		code, _ := errorOf(t, decode(t, handleCall(req)).(map[string]any))
		if code != CodeInvalid {
			t.Errorf("%s: %s", name, code)
		}
	}
	// The request map counts: data may nest 63 deep, not 64.
	deep := encode(t, map[string]any{"hook": "x"})
	deep[0]++ // one more pair
	deep = append(deep, "\xa4data"...)
	for i := 0; i < msgpack.MaxDepth; i++ {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0xc0)
	if code, msg := errorOf(t, decode(t, handleCall(deep)).(map[string]any)); code != CodeInvalid ||
		!strings.Contains(msg, "deeper") {
		t.Errorf("data 64 deep: %s %q", code, msg)
	}
	// Unknown request keys are skipped.
	out := handleCall(encode(t, map[string]any{"hook": "x", "later": []any{1, 2}}))
	if !reflect.DeepEqual(decode(t, out), map[string]any{"ok": true}) {
		t.Errorf("extra request key: %x", out)
	}
}

func TestPatternDispatch(t *testing.T) {
	tagged := func(name string) Handler {
		return func(c *Call) Reply { return c.ReturnString(name) }
	}
	use(t, &testPlugin{hooks: []Hook{
		On("on_tag", tagged("upper")).WithPattern("upper"),
		On("on_tag", tagged("redact")).WithPattern("redact*"),
		On("output_extension", tagged("ext")).WithPattern("chart"),
		On("on_plain_text", tagged("plain")),
	}})
	register(t)
	for _, c := range []struct {
		hook string
		data any
		want string
	}{
		{"on_tag", map[string]any{"tag": "upper", "text": "a"}, "upper"},
		{"on_tag", map[string]any{"tag": "redact.pii"}, "redact"},
		{"output_extension", map[string]any{"name": "chart"}, "ext"},
		{"on_plain_text", "x", "plain"},
	} {
		if got := call(t, c.hook, c.data)["value"]; got != c.want {
			t.Errorf("%s %v: %v", c.hook, c.data, got)
		}
	}
	for _, data := range []any{map[string]any{"tag": "lower"}, "not a map", map[string]any{"tag": 5}} {
		if code, _ := errorOf(t, call(t, "on_tag", data)); code != CodeUnhandled {
			t.Errorf("on_tag %v: %s", data, code)
		}
	}
}

func TestHostCalls(t *testing.T) {
	use(t, Base{})
	var sent []any
	answers := map[string][]byte{}
	fakeHost = func(req []byte) []byte {
		v := decode(t, req).(map[string]any)
		sent = append(sent, v)
		key, _ := v["key"].(string)
		return answers[key]
	}
	answers["greeting"] = encode(t, map[string]any{"ok": true, "value": "Servus"})
	answers["missing"] = encode(t, map[string]any{"ok": false,
		"error": map[string]any{"code": "not_found", "message": "no setting 'missing'"}})
	answers["quiet"] = encode(t, map[string]any{"ok": false, "error": map[string]any{"code": "denied"}})
	answers["garbage"] = []byte{0x82, 0xa2}
	answers["no-ok"] = encode(t, map[string]any{"value": 1})
	answers["no-code"] = encode(t, map[string]any{"ok": false, "error": map[string]any{}})
	answers["valueless"] = encode(t, map[string]any{"ok": true})
	answers[""] = encode(t, map[string]any{"ok": true, "value": map[string]any{"count": 3}})

	a := ConfigGet("greeting")
	if s, err := a.ValueString(); !a.OK || err != nil || s != "Servus" || a.Err() != nil {
		t.Fatalf("%+v", a)
	}
	if !reflect.DeepEqual(sent[0], map[string]any{"op": "config.get", "key": "greeting"}) {
		t.Fatalf("request %#v", sent[0])
	}
	a = ConfigGet("missing")
	if a.OK || !a.Is(CodeNotFound) || a.Message != "no setting 'missing'" {
		t.Fatalf("%+v", a)
	}
	var e *Error
	if !errors.As(a.Err(), &e) || e.Code != CodeNotFound || a.Fail().code != CodeNotFound {
		t.Fatalf("%v", a.Err())
	}
	if a = SecretGet("quiet"); !a.Is(CodeDenied) || a.Message != "" {
		t.Fatalf("%+v", a)
	}
	if sent[len(sent)-1].(map[string]any)["op"] != "secret.get" {
		t.Fatal("secret.get not sent")
	}
	for _, key := range []string{"garbage", "no-ok", "no-code", "absent"} {
		if a = ConfigGet(key); !a.Is(CodeInternal) {
			t.Errorf("%s: %+v", key, a)
		}
		if m := decode(t, a.Raw).(map[string]any); m["ok"] != false {
			t.Errorf("%s: made-up answer %#v", key, m)
		}
	}
	if a = ConfigGet("valueless"); !a.OK || string(a.Value) != "\xc0" {
		t.Errorf("valueless: %+v", a)
	}
	if v, err := ConfigAll().Decode(); err != nil || !reflect.DeepEqual(v, map[string]any{"count": int64(3)}) {
		t.Errorf("ConfigAll: %#v %v", v, err)
	}
	if !reflect.DeepEqual(sent[len(sent)-1], map[string]any{"op": "config.get"}) {
		t.Errorf("ConfigAll sent %#v", sent[len(sent)-1])
	}
	HostOp("state.set", map[string]any{"value": []any{1}, "key": "k", "op": "ignored"})
	req := sent[len(sent)-1].(map[string]any)
	if req["op"] != "state.set" || req["key"] != "k" || len(req) != 3 {
		t.Errorf("HostOp sent %#v", req)
	}
	if a = HostOp("x", map[string]any{"bad": struct{}{}}); !a.Is(CodeInvalid) {
		t.Errorf("unencodable argument: %+v", a)
	}
	if a = HostCall(nil); !a.Is(CodeInvalid) {
		t.Errorf("empty request: %+v", a)
	}
}

func TestFailError(t *testing.T) {
	for err, code := range map[error]string{
		&Error{Code: CodeLimit, Message: "m"}: CodeLimit,
		msgpack.ErrType:                       CodeInvalid,
		errors.New("other"):                   CodeFailed,
	} {
		if r := FailError(err); r.kind != replyFail || r.code != code {
			t.Errorf("%v: %+v", err, r)
		}
	}
}
