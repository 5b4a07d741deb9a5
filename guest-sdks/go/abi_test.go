package wasmext

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"wasmext.dev/wasmext/raw"
)

// The constants of abi.go are written by hand; this test holds them to
// abi/abi.toml ($WASMEXT_ABI_TOML, else the checkout's), read with a small
// parser for the subset of TOML that file uses.

type tomlTable struct {
	name   string
	fields map[string]string // raw values: "1", "\"text\"", "[\"i32\"]"
}

func readABITable(t *testing.T) []tomlTable {
	t.Helper()
	path := os.Getenv("WASMEXT_ABI_TOML")
	if path == "" {
		path = filepath.Join("..", "..", "abi", "abi.toml")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("cannot read abi.toml (set WASMEXT_ABI_TOML): %v", err)
	}
	defer f.Close()
	var tables []tomlTable
	pending := "" // the key of a multi-line array being read ([hooks] names)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case pending != "":
			fields := tables[len(tables)-1].fields
			fields[pending] += " " + line
			if strings.HasSuffix(line, "]") {
				pending = ""
			}
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			tables = append(tables, tomlTable{strings.Trim(line, "[]"), map[string]string{}})
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || len(tables) == 0 {
				t.Fatalf("abi.toml: cannot read %q", line)
			}
			key, value := strings.TrimSpace(k), strings.TrimSpace(v)
			tables[len(tables)-1].fields[key] = value
			if strings.HasPrefix(value, "[") && !strings.HasSuffix(value, "]") {
				pending = key
			}
		}
	}
	return tables
}

func tomlInt(t *testing.T, v string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 10, 64)
	if err != nil {
		t.Fatalf("abi.toml: %q is not an int", v)
	}
	return n
}

func tomlStr(t *testing.T, v string) string {
	t.Helper()
	s, err := strconv.Unquote(v)
	if err != nil {
		t.Fatalf("abi.toml: %q is not a string", v)
	}
	return s
}

func TestConstantsMatchABITable(t *testing.T) {
	var codes, exports, imports []string
	var ops []OpInfo
	limits := map[string]int64{}
	for _, tab := range readABITable(t) {
		f := tab.fields
		switch tab.name {
		case "version":
			if tomlInt(t, f["major"]) != ABIMajor || tomlInt(t, f["minor"]) != ABIMinor {
				t.Errorf("version %s.%s, SDK %d.%d", f["major"], f["minor"], ABIMajor, ABIMinor)
			}
		case "log_levels":
			want := map[string]LogLevel{"trace": LogTrace, "debug": LogDebug, "info": LogInfo,
				"warn": LogWarn, "error": LogError}
			if len(f) != len(want) {
				t.Errorf("log levels %v", f)
			}
			for name, v := range f {
				if lvl, ok := want[name]; !ok || int64(lvl) != tomlInt(t, v) {
					t.Errorf("log level %s = %s", name, v)
				}
			}
		case "error_codes":
			codes = append(codes, tomlStr(t, f["code"]))
		case "ops":
			ops = append(ops, OpInfo{tomlStr(t, f["op"]), tomlStr(t, f["capability"]),
				int(tomlInt(t, f["since"])), tomlStr(t, f["status"]) == "reserved"})
		case "exports":
			exports = append(exports, tomlStr(t, f["name"]))
		case "imports":
			imports = append(imports, tomlStr(t, f["module"])+"."+tomlStr(t, f["name"]))
		case "limits":
			for k, v := range f {
				limits[k] = tomlInt(t, v)
			}
		}
	}
	if strings.Join(codes, " ") != strings.Join(ErrorCodes, " ") {
		t.Errorf("error codes:\n toml %v\n SDK  %v", codes, ErrorCodes)
	}
	if len(ops) != len(Ops) {
		t.Errorf("%d ops in abi.toml, %d in the SDK", len(ops), len(Ops))
	}
	for i := range min(len(ops), len(Ops)) {
		if ops[i] != Ops[i] {
			t.Errorf("op %d: toml %+v, SDK %+v", i, ops[i], Ops[i])
		}
	}
	wantExports := []string{raw.ExportMemory, raw.ExportABIVersion, raw.ExportAlloc, raw.ExportFree,
		raw.ExportRegister, raw.ExportCall, raw.ExportInitialize}
	if strings.Join(exports, " ") != strings.Join(wantExports, " ") {
		t.Errorf("exports: toml %v, SDK %v", exports, wantExports)
	}
	wantImports := []string{raw.ImportModule + "." + raw.ImportHostCall, raw.ImportModule + "." + raw.ImportLog}
	if strings.Join(imports, " ") != strings.Join(wantImports, " ") {
		t.Errorf("imports: toml %v, SDK %v", imports, wantImports)
	}
	sdkLimits := map[string]int64{
		"fuel_per_call": LimitFuelPerCall, "memory_bytes": LimitMemoryBytes,
		"table_elements": LimitTableElements,
		"timeout_ms":     LimitTimeoutMS, "max_input_bytes": LimitMaxInputBytes,
		"max_output_bytes": LimitMaxOutputBytes, "max_host_calls": LimitMaxHostCalls,
		"host_call_timeout_ms":   LimitHostCallTimeoutMS,
		"max_host_request_bytes": LimitMaxHostRequestBytes,
		"max_msgpack_depth":      LimitMaxMsgpackDepth, "max_wasm_stack_bytes": LimitMaxWasmStackBytes,
		"max_log_line_bytes": LimitMaxLogLineBytes, "max_log_lines": LimitMaxLogLines,
	}
	if len(limits) != len(sdkLimits) {
		t.Errorf("limits: toml has %d, SDK %d", len(limits), len(sdkLimits))
	}
	for k, v := range limits {
		if sdkLimits[k] != v {
			t.Errorf("limit %s: toml %d, SDK %d", k, v, sdkLimits[k])
		}
	}
	// The op names the wrappers send are the table's.
	for _, op := range []string{OpConfigGet, OpSecretGet, OpABIInfo, OpLog} {
		found := false
		for _, o := range ops {
			found = found || o.Op == op
		}
		if !found {
			t.Errorf("op %s not in abi.toml", op)
		}
	}
}
