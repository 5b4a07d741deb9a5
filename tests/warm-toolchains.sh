#!/usr/bin/env bash
# Usage: warm-toolchains.sh PYTHON
# Fill the compilers' own caches once, as installing a toolchain would: Zig's wasm32-wasi
# and native libc (C and Zig plugins, the C SDK's native tests) and Go's standard library
# for wasip1 and the host (Go plugins, `go vet`, `go test`). The tests use these caches
# where they are (tests/conftest.py); a cold one costs about a minute of a test run.
set -euo pipefail
python=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'int answer(void) { return 42; }\n' > "$tmp/a.c"
printf '#include <stdio.h>\nint main(void) { puts("ok"); return 0; }\n' > "$tmp/main.c"
export ZIG_GLOBAL_CACHE_DIR="${ZIG_GLOBAL_CACHE_DIR:-$HOME/.cache/wasmext-zig}"
if "$python" -c 'import ziglang' 2>/dev/null; then
    echo "warming Zig's caches in $ZIG_GLOBAL_CACHE_DIR"
    "$python" -m ziglang cc --target=wasm32-wasi -mexec-model=reactor -O2 -std=c11 \
        "$tmp/a.c" -Wl,--no-entry -Wl,--export=answer -o "$tmp/a.wasm"
    "$python" -m ziglang cc -std=c11 -O1 -g -fsanitize=undefined -fno-sanitize-recover=all \
        "$tmp/main.c" -o "$tmp/main"
    "$tmp/main" >/dev/null
fi
go=$(command -v go || true)
for candidate in /usr/lib/go/bin/go /usr/local/go/bin/go; do
    [ -n "$go" ] || { [ -x "$candidate" ] && go=$candidate; }
done
if [ -n "$go" ]; then
    echo "warming Go's build cache ($("$go" env GOCACHE))"
    GOOS=wasip1 GOARCH=wasm GOTOOLCHAIN=local "$go" build std
    GOTOOLCHAIN=local "$go" build std
fi
