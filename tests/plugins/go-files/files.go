// go-files: file work through Go's wasip1 os package on a granted folder
// (tests/sandbox/test_fs_grants.py): "read" a path, "write" "path\ntext", "list" a folder.
package main

import (
	"os"
	"strings"

	"wasmext.dev/wasmext"
)

type Files struct{ wasmext.Base }

func (Files) Info() wasmext.Info { return wasmext.Info{Name: "go-files", Version: "0.1.0"} }

func (f Files) Hooks() []wasmext.Hook {
	return []wasmext.Hook{wasmext.On("read", f.Read), wasmext.On("write", f.Write), wasmext.On("list", f.List)}
}

func (Files) Read(c *wasmext.Call) wasmext.Reply {
	p, _ := c.DataString()
	b, err := os.ReadFile(p)
	if err != nil {
		return wasmext.Fail("failed", err.Error())
	}
	return c.ReturnString(string(b))
}

func (Files) Write(c *wasmext.Call) wasmext.Reply {
	p, _ := c.DataString()
	parts := strings.SplitN(p, "\n", 2)
	if err := os.WriteFile(parts[0], []byte(parts[1]), 0o644); err != nil {
		return wasmext.Fail("failed", err.Error())
	}
	return c.ReturnString("ok")
}

func (Files) List(c *wasmext.Call) wasmext.Reply {
	p, _ := c.DataString()
	es, err := os.ReadDir(p)
	if err != nil {
		return wasmext.Fail("failed", err.Error())
	}
	names := []string{}
	for _, e := range es {
		names = append(names, e.Name())
	}
	return c.ReturnString(strings.Join(names, ","))
}

func init() { wasmext.Register(Files{}) }

func main() {}
