# The README's two commands: `make demo` and `make test` (each sets up .venv first).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Re-install when the package's dependency files change.
STAMP := $(VENV)/.installed-$(shell cat setup.cfg setup.py pyproject.toml | sha1sum | cut -c1-10)
# DDS never leaves this machine: loopback interface, no multicast.
export CYCLONEDDS_URI := file://$(CURDIR)/config/cyclonedds-loopback.xml

.PHONY: setup demo test lint clean

$(STAMP):
	rm -f $(VENV)/.installed-*
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[tools,vlm,dev,openvino]'
	touch $@

setup: $(STAMP)

demo: setup
	$(PY) -m openclaw_vision.cli demo --out out/demo

lint: setup
	$(PY) -m ruff check .

test: setup lint
	$(PY) -m pytest -q

clean:
	rm -rf out .pytest_cache .ruff_cache
