# The two quick-start commands are `make demo` and `make test`; both set up
# everything they need on a fresh machine (a .venv with the project installed
# as a plain path install, and the guest toolchain from PyPI).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PLUGINS := plugins/pii-mask plugins/normalize-text \
           guest-sdks/c/conformance guest-sdks/zig/conformance \
           guest-sdks/c/examples/hello guest-sdks/zig/examples/hello

.PHONY: setup plugins demo test lint bench generate clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

plugins: setup
	$(BIN)/wasmext build $(PLUGINS)

demo: plugins
	$(BIN)/python docs/demo.py

lint: setup
	$(BIN)/python abi/generate.py --check
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m ziglang fmt --check guest-sdks/zig plugins/normalize-text

test: lint
	$(BIN)/python -m pytest -q

bench: plugins
	$(BIN)/python benchmarks/run.py

generate: setup
	$(BIN)/python abi/generate.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -name '*.wasm' -not -path './.venv/*' -delete
