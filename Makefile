# Two commands: `make demo` and `make test`. Each creates .venv when missing. (`make options` after editing a
# decoding option in tfm_export/runtime/options/generation.py.)
# .venv gets the `export` extra (PyTorch: the demo exports); `make test` adds the `test` extra. A plain
# `pip install .` is the runtime-only install (no PyTorch), see README "Deploy".
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CONSTRAINTS := -c constraints.txt

.PHONY: demo test test-long test-gpu install install-test runtimes-npm espeak-ng options image clean

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(CONSTRAINTS) -e '.[export]'
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) install -q $(CONSTRAINTS) -e '.[test]'
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

demo: $(VENV)/.installed
	$(VENV)/bin/tfm-export demo

# The Node and browser runtimes' packages (only the npm registry is needed; tests skip without node).
runtimes-npm:
	@if command -v npm >/dev/null; then \
	  for d in runtimes/node runtimes/web; do (cd $$d && npm ci --no-audit --no-fund --loglevel=error) || exit 1; done; \
	else echo "SKIPPED: npm not found; the Node and browser runtime tests will be skipped"; fi

# Real speech for the audio tests (tests/test_audio.py): Debian's espeak-ng, installed where it is missing and
# we are root (CI runs as root, as for .ci/run's chromium); elsewhere those cases skip.
espeak-ng:
	@if command -v espeak-ng >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng >/dev/null) \
	    || echo "SKIPPED: espeak-ng could not be installed; the audio tests' speech cases will be skipped"; \
	else echo "SKIPPED: espeak-ng not found (apt-get install espeak-ng); the audio tests' speech cases will be skipped"; fi

# Two workers (pytest-xdist): most of the suite is single-threaded PyTorch exporting (tests/conftest.py
# keeps each module, and modules sharing fixtures, on one worker).
test: $(VENV)/.installed-test runtimes-npm espeak-ng
	$(PY) -m pytest -q -m "not long" -n 2 --dist loadfile

# The realistic-size exports (every family's base layer structure, random weights): ~7 minutes more.
test-long: $(VENV)/.installed-test runtimes-npm
	$(PY) -m pytest -q -m long -n 2 --dist loadfile

# The GPU tests alone, with their float16 agreement figures (-rP); they skip without a usable GPU.
test-gpu: $(VENV)/.installed-test
	$(PY) -m pytest -q -m gpu -rP tests/test_gpu.py tests/test_runtime.py tests/test_variants.py

# Rewrite what is generated from runtime/options/generation.py's option declarations (GenerationConfig): the Node
# runtime's options/generation.mjs and index.d.ts regions and the manifest schema's `generation` section.
# tests/test_options_schema.py fails while one is stale.
options: $(VENV)/.installed
	$(PY) -m tools.options_codegen

# The server image (Dockerfile) with docker or podman; offline where no registry serves python:3.11-slim
# (tools/build_image.py: debootstrap's Debian and a wheelhouse, cached in /var/cache/tfm-export-image).
image:
	$(PYTHON) tools/build_image.py

clean:
	rm -rf $(VENV) demo_out
