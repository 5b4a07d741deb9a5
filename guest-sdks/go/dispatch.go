package wasmext

import (
	"wasmext.dev/wasmext/msgpack"
)

// The two output buffers, reused by every entry (SPEC 1.4: the host copies a
// response before it enters the guest again). value is the Call.Out a
// handler writes its reply value to, right after the start of the response
// map (so a reply needs no copy); out holds registration maps and errors.
var (
	out   msgpack.Writer
	value msgpack.Writer
)

// Fixed pieces of responses.
var (
	okOnly     = []byte("\x81\xa2ok\xc3")
	okStop     = []byte("\x82\xa2ok\xc3\xa4stop\xc3")
	stopTail   = []byte("\xa4stop\xc3")
	valueHead2 = []byte("\x82\xa2ok\xc3\xa5value")
	valueHead3 = []byte("\x83")
	// answered when a handler's error code or message is not UTF-8
	badMessage = func() []byte {
		var w msgpack.Writer
		_ = w.WriteValue(map[string]any{"ok": false, "error": map[string]any{
			"code": CodeFailed, "message": "the error code or message is not UTF-8"}})
		return w.Bytes()
	}()
)

// handleRegister answers wasmext_register: it notes what later calls need
// from the request and returns the registration map (nil: no plugin).
func handleRegister(request []byte) []byte {
	noteRegistration(request)
	out.Reset()
	if plugin == nil {
		Log(LogError, "wasmext: no plugin registered; call wasmext.Register from an init function")
		return nil
	}
	hooks = plugin.Hooks()
	var extra msgpack.Writer
	nExtra := plugin.Extra(&extra)
	writeRegistration(&out, plugin.Info(), extra.Bytes(), nExtra)
	if extra.Err() != nil || nExtra < 0 || msgpack.ValidateUTF8(out.Bytes()) != nil {
		Log(LogError, "wasmext: Extra wrote unusable registration entries; they are left out")
		out.Reset()
		writeRegistration(&out, plugin.Info(), nil, 0)
	}
	if err := msgpack.ValidateUTF8(out.Bytes()); err != nil {
		Log(LogError, "wasmext: the registration map cannot be encoded: "+err.Error())
		return nil
	}
	return out.Bytes()
}

func writeRegistration(w *msgpack.Writer, info Info, extra []byte, nExtra int) {
	pairs := 2 + max(nExtra, 0)
	if info.Name != "" {
		pairs++
	}
	if info.Version != "" {
		pairs++
	}
	// An older host would keep the key as an unknown one: it is left out there.
	areaPtr, areaSize, area := answerRegion()
	area = area && hostMinor >= AnswerRegionSince
	if area {
		pairs++
	}
	w.WriteMapHeader(pairs)
	w.WriteString("abi_minor")
	w.WriteInt(ABIMinor)
	if area {
		w.WriteString("answer_region")
		w.WriteMapHeader(2)
		w.WriteString("ptr")
		w.WriteInt(int64(areaPtr))
		w.WriteString("size")
		w.WriteInt(int64(areaSize))
	}
	if info.Name != "" {
		w.WriteString("name")
		w.WriteString(info.Name)
	}
	if info.Version != "" {
		w.WriteString("version")
		w.WriteString(info.Version)
	}
	w.WriteString("hooks")
	w.WriteArrayHeader(len(hooks))
	for _, h := range hooks {
		prio, hasPrio := h.Priority()
		n := 1
		if hasPrio {
			n++
		}
		if h.Pattern != "" {
			n++
		}
		w.WriteMapHeader(n)
		w.WriteString("hook")
		w.WriteString(h.Name)
		if hasPrio {
			w.WriteString("priority")
			w.WriteInt(int64(prio))
		}
		if h.Pattern != "" {
			w.WriteString("pattern")
			w.WriteString(h.Pattern)
		}
	}
	w.WriteRaw(extra)
}

// noteRegistration keeps the host's ABI minor and the plugin id. A request
// it cannot read only loses them: registering still succeeds.
func noteRegistration(request []byte) {
	if msgpack.Validate(request) != nil {
		return
	}
	doc := msgpack.NewReader(request)
	if abi, err := doc.Lookup("abi"); err == nil {
		if r, err := abi.Lookup("minor"); err == nil {
			if minor, err := r.ReadInt(); err == nil && minor >= 0 && minor <= 0xffff {
				hostMinor = int(minor)
			}
		}
	}
	if p, err := doc.Lookup("plugin"); err == nil {
		if r, err := p.Lookup("id"); err == nil {
			if id, err := r.ReadString(); err == nil {
				pluginID = id
			}
		}
	}
}

// handleCall answers wasmext_call: it reads the request, finds the hook's
// handler, runs it and turns its Reply into the response.
func handleCall(request []byte) []byte {
	value.StartAfter(valueHead2)
	name, data, meta, problem := parseRequest(request)
	if problem != "" {
		return failure(CodeInvalid, problem)
	}
	c := &Call{Hook: name, Data: data, Meta: meta, Out: &value}
	if hooks == nil && plugin != nil {
		hooks = plugin.Hooks()
	}
	h := findHook(name, c.Data)
	if h == nil {
		return failure(CodeUnhandled, "no handler for hook '"+name+"'")
	}
	if h.Handler == nil {
		return respond(Unchanged)
	}
	return respond(invoke(h.Handler, c))
}

var encodedNilReader = msgpack.NewReader(encodedNil)

// parseRequest reads {"hook": str, "data": any, "meta": any} in one pass.
// Reading checks every value as it passes (bounds, depth, no ext types), so
// the request needs no separate validation.
func parseRequest(request []byte) (name string, data, meta msgpack.Reader, problem string) {
	data, meta = encodedNilReader, encodedNilReader
	r := msgpack.NewReader(request)
	n, err := r.ReadMapLen()
	if err != nil {
		return "", data, meta, "call request is not a map: " + err.Error()
	}
	haveHook := false
	for i := 0; i < n && err == nil; i++ {
		var key []byte
		if key, err = r.ReadStringBytes(); err != nil {
			break
		}
		switch string(key) {
		case "hook":
			name, err = r.ReadString()
			if err == msgpack.ErrType {
				return "", data, meta, `call request's "hook" is not a string`
			}
			haveHook = err == nil
		case "data": // inside the request map: 63 levels left
			data, err = r.SubIn(1)
		case "meta":
			meta, err = r.SubIn(1)
		default:
			err = r.Skip()
		}
	}
	if err == nil {
		err = r.Finish()
	}
	if err != nil {
		return "", data, meta, "call request is not valid MessagePack: " + err.Error()
	}
	if !haveHook {
		return "", data, meta, `call request has no string "hook"`
	}
	return name, data, meta, ""
}

// findHook returns the hook's entry; for entries with a pattern, the first
// whose pattern matches the data's "tag" (or "name"), so one plugin can
// serve several tags or extensions.
func findHook(name string, data msgpack.Reader) *Hook {
	var subject string
	haveSubject := false
	for i := range hooks {
		h := &hooks[i]
		if h.Name != name {
			continue
		}
		if h.Pattern == "" {
			return h
		}
		if !haveSubject {
			subject, haveSubject = dataSubject(data), true
		}
		if patternMatches(h.Pattern, subject) {
			return h
		}
	}
	return nil
}

func dataSubject(data msgpack.Reader) string {
	r, err := data.Lookup("tag")
	if err != nil {
		if r, err = data.Lookup("name"); err != nil {
			return ""
		}
	}
	s, _ := r.ReadString()
	return s
}

// patternMatches: an exact name, or a prefix ending in '*' (docs/hooks.md).
func patternMatches(pattern, s string) bool {
	if n := len(pattern); n > 0 && pattern[n-1] == '*' {
		return len(s) >= n-1 && s[:n-1] == pattern[:n-1]
	}
	return s == pattern
}

// invoke runs a handler; a panic becomes a "failed" answer (and a log line)
// instead of ending the instance.
func invoke(h Handler, c *Call) (reply Reply) {
	defer func() {
		if v := recover(); v != nil {
			msg := "handler panicked: " + panicText(v)
			Log(LogError, msg)
			reply = Fail(CodeFailed, msg)
		}
	}()
	return h(c)
}

func panicText(v any) string {
	switch v := v.(type) {
	case error:
		return v.Error()
	case string:
		return v
	case interface{ String() string }:
		return v.String()
	}
	return "a value that is not an error or string"
}

// respond turns a handler's reply and what it wrote to Call.Out into the
// response, refusing (as "failed") a value the host would refuse.
func respond(reply Reply) []byte {
	switch reply.kind {
	case replyFail:
		return failure(reply.code, reply.message)
	case replyValue, replyStop:
	default:
		return okOnly
	}
	if err := value.Err(); err != nil {
		code := CodeFailed
		if err == msgpack.ErrTooLong {
			code = CodeLimit
		}
		return failure(code, "the handler's reply value cannot be encoded: "+err.Error())
	}
	if value.Len() == 0 {
		if reply.kind == replyStop {
			return okStop
		}
		return failure(CodeFailed, "the handler returned wasmext.Value but wrote no value")
	}
	// The value sits one level down in the response map.
	if err := msgpack.ValidateIn(value.Bytes(), 1); err != nil {
		return failure(CodeFailed, "the handler wrote a malformed value (not exactly one value): "+
			err.Error())
	}
	response := value.Framed()
	if reply.kind == replyStop {
		response[0] = valueHead3[0] // one more pair in the top-level fixmap
		value.WriteRaw(stopTail)
		response = value.Framed()
	}
	return response
}

// failure is the response {"ok": false, "error": {"code", "message"}}; an
// empty message is left out.
func failure(code, message string) []byte {
	w := &out
	w.Reset()
	w.WriteMapHeader(2)
	w.WriteString("ok")
	w.WriteBool(false)
	w.WriteString("error")
	if message == "" {
		w.WriteMapHeader(1)
	} else {
		w.WriteMapHeader(2)
	}
	w.WriteString("code")
	w.WriteString(code)
	if message != "" {
		w.WriteString("message")
		w.WriteString(message)
	}
	if w.Err() != nil {
		return badMessage
	}
	return w.Bytes()
}
