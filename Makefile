# Two commands: `make demo` and `make test`. Each creates .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CONSTRAINTS := -c constraints.txt

.PHONY: demo test install install-test clean

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(CONSTRAINTS) -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) install -q $(CONSTRAINTS) -e '.[test]'
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

demo: $(VENV)/.installed
	$(PY) -m tfm_export.demo

test: $(VENV)/.installed-test
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) demo_out
