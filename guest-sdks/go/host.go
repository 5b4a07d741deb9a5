package wasmext

import (
	"wasmext.dev/wasmext/msgpack"
)

// Error is an error as the ABI carries it: an error.code (one of the Code*
// constants) and a message.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Answer is the host's answer to one host_call, checked and decoded. It owns
// its bytes (the region the host wrote them into belongs to the guest once
// the call returns, SPEC 1.4), so it stays valid as long as you keep it; the
// garbage collector reclaims it afterwards.
type Answer struct {
	// OK is the answer's "ok".
	OK bool
	// Value is the encoded "value" of a successful answer (an encoded nil
	// when the answer has none).
	Value []byte
	// Code and Message are error.code and error.message of a failed answer.
	Code    string
	Message string
	// Raw is the whole answer map as the host sent it (for an answer the SDK
	// made up, see below, its encoding of the same fields).
	Raw []byte
}

// An answer the SDK makes up when the host gave none it could use: no
// answer at all or a malformed one is "internal" (SPEC 4.2), an op newer
// than the host's minor is "unsupported" (SPEC 3.1).

var encodedNil = []byte{0xc0}

func localAnswer(code, message string) Answer {
	var w msgpack.Writer
	w.WriteMapHeader(2)
	w.WriteString("ok")
	w.WriteBool(false)
	w.WriteString("error")
	w.WriteMapHeader(2)
	w.WriteString("code")
	w.WriteString(code)
	w.WriteString("message")
	w.WriteString(message)
	return Answer{Value: encodedNil, Code: code, Message: message, Raw: w.Bytes()}
}

// Reader returns a reader on the value.
func (a Answer) Reader() msgpack.Reader { return msgpack.NewReader(a.Value) }

// ValueString returns the value as a string (msgpack.ErrType if it is not one).
func (a Answer) ValueString() (string, error) {
	r := a.Reader()
	return r.ReadString()
}

// ValueInt returns the value as an integer (msgpack.ErrType if it is not one).
func (a Answer) ValueInt() (int64, error) {
	r := a.Reader()
	return r.ReadInt()
}

// ValueBool returns the value as a bool (msgpack.ErrType if it is not one).
func (a Answer) ValueBool() (bool, error) {
	r := a.Reader()
	return r.ReadBool()
}

// Decode returns the value as Go values (see msgpack.Reader.Decode).
func (a Answer) Decode() (any, error) {
	r := a.Reader()
	return r.Decode()
}

// Is reports whether the host refused with this error code.
func (a Answer) Is(code string) bool { return !a.OK && a.Code == code }

// Err is nil for a successful answer, else an *Error with its code and message.
func (a Answer) Err() error {
	if a.OK {
		return nil
	}
	return &Error{Code: a.Code, Message: a.Message}
}

// Fail passes a failed answer's code and message on as the hook's error:
// `return answer.Fail()`.
func (a Answer) Fail() Reply {
	if a.OK {
		return Fail(CodeInternal, "host_call did not fail")
	}
	return Fail(a.Code, a.Message)
}

// parseAnswer checks and decodes an answer map the host wrote.
func parseAnswer(b []byte) Answer {
	malformed := localAnswer(CodeInternal, "the host's answer is malformed")
	if msgpack.Validate(b) != nil {
		return malformed
	}
	doc := msgpack.NewReader(b)
	a := Answer{Raw: b, Value: encodedNil}
	r, err := doc.Lookup("ok")
	if err != nil {
		return malformed
	}
	if a.OK, err = r.ReadBool(); err != nil {
		return malformed
	}
	if a.OK {
		if r, err = doc.Lookup("value"); err == nil {
			a.Value, _ = r.Raw() // validated above
		}
		return a
	}
	e, err := doc.Lookup("error")
	if err != nil {
		return malformed
	}
	if r, err = e.Lookup("code"); err != nil {
		return malformed
	}
	if a.Code, err = r.ReadString(); err != nil || a.Code == "" {
		return malformed
	}
	if r, err = e.Lookup("message"); err == nil {
		a.Message, _ = r.ReadString() // optional: absent or not a str reads as ""
	}
	return a
}

// HostCall sends one encoded request map ({"op": ..., args}) to the host and
// returns its answer. It never fails: when the host cannot answer, or answers
// something malformed, the result is an "internal" answer made up by the SDK.
// The request stays yours; the host copies it before HostCall returns.
//
// The host traps (ending the hook call) on a request over
// max_host_request_bytes (256 KiB by default) or more than max_host_calls
// (1000) calls in one hook call.
func HostCall(request []byte) Answer {
	if len(request) == 0 {
		return localAnswer(CodeInvalid, "empty host_call request")
	}
	if uint64(len(request)) > msgpack.MaxLen {
		return localAnswer(CodeLimit, "host_call request too long")
	}
	answer, problem := sendHostCall(request)
	if problem != "" {
		return localAnswer(CodeInternal, problem)
	}
	return parseAnswer(answer)
}

// requestBuf builds the requests of the wrappers below; the host copies a
// request before it returns, so one buffer serves every call.
var requestBuf msgpack.Writer

// sinceOK applies SPEC 3.1: an op newer than the host's minor answers
// unsupported locally. Ops the SDK does not know go to the host (a guest may
// probe).
func sinceOK(op string) bool {
	for _, o := range Ops {
		if o.Op == op {
			return o.Since <= HostABIMinor()
		}
	}
	return true
}

// HostOp sends {"op": op, <args>} (args in key order; an "op" key in args is
// ignored) and returns the answer: the generic host call for any op of
// SPEC 4.3. Argument values are what msgpack.Writer.WriteValue accepts.
func HostOp(op string, args map[string]any) Answer {
	if !sinceOK(op) {
		return localAnswer(CodeUnsupported, "the host's ABI minor predates op "+op)
	}
	w := &requestBuf
	w.Reset()
	n := len(args)
	if _, dup := args["op"]; dup {
		n--
	}
	w.WriteMapHeader(n + 1)
	w.WriteString("op")
	w.WriteString(op)
	for _, k := range sortedKeys(args) {
		if k != "op" {
			w.WriteString(k)
			_ = w.WriteValue(args[k])
		}
	}
	if err := w.Err(); err != nil {
		return localAnswer(CodeInvalid, "host_call arguments: "+err.Error())
	}
	return HostCall(w.Bytes())
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// insertion sort: argument maps have a handful of keys
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// keyOp sends {"op": op, "key": key} without building a map.
func keyOp(op, key string) Answer {
	if !sinceOK(op) {
		return localAnswer(CodeUnsupported, "the host's ABI minor predates op "+op)
	}
	w := &requestBuf
	w.Reset()
	w.WriteMapHeader(2)
	w.WriteString("op")
	w.WriteString(op)
	w.WriteString("key")
	w.WriteString(key)
	if err := w.Err(); err != nil {
		return localAnswer(CodeInvalid, "host_call arguments: "+err.Error())
	}
	return HostCall(w.Bytes())
}

// ConfigGet reads one setting (config.get): the value, or a "not_found"
// answer when it is unset, "denied" when it is sensitive.
func ConfigGet(key string) Answer { return keyOp(OpConfigGet, key) }

// ConfigAll reads every non-sensitive setting (config.get without a key): a
// map of name to value.
func ConfigAll() Answer { return HostCall([]byte("\x81\xa2op\xaaconfig.get")) }

// SecretGet reads a sensitive setting (secret.get); the plugin needs the
// "secrets" capability.
func SecretGet(key string) Answer { return keyOp(OpSecretGet, key) }

// ABIInfo asks for the negotiated ABI, the host's name and version and the
// plugin's limits (abi.info).
func ABIInfo() Answer { return HostCall([]byte("\x81\xa2op\xa8abi.info")) }

// Log writes one line to the plugin log through the direct log import
// (cheaper than the "log" op). The host cuts it to max_log_line_bytes and
// replaces control characters; text should be UTF-8.
func Log(level LogLevel, text string) { writeLog(level, text) }

// Registration facts, from the registration request.
var (
	hostMinor int
	pluginID  string
)

// HostABIMinor is the ABI minor the host announced at registration (0 before).
func HostABIMinor() int { return hostMinor }

// PluginID is the plugin id the host announced at registration ("" before).
func PluginID() string { return pluginID }
