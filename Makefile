# The README's two commands: `make demo` and `make test` (each sets up .venv first).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The open_clip_torch release whose wheel gives CLIP's tokenizer merges (as openclaw_vision/text/merges.py pins).
OPEN_CLIP_VERSION := 3.3.0
# Re-install when the package's dependency files change.
STAMP := $(VENV)/.installed-$(shell (cat setup.cfg setup.py pyproject.toml; echo $(OPEN_CLIP_VERSION)) | sha1sum | cut -c1-10)
# DDS never leaves this machine: loopback interface, no multicast.
export CYCLONEDDS_URI := file://$(CURDIR)/config/cyclonedds-loopback.xml

# TensorRT's Python bindings, 10.x and 11.x, each in a folder of its own (both are the module
# `tensorrt_bindings`): the gpu_static tests import them over stub libraries, no TensorRT runtime.
TRT_BINDINGS := 10=tensorrt-cu12-bindings==10.16.1.11 11=tensorrt-cu13-bindings==11.4.0.106
TRT_STAMP := $(VENV)/trt/.installed-$(shell echo $(TRT_BINDINGS) | sha1sum | cut -c1-10)

# The `ros2` test tier (test/ros2/): a real ROS 2 Humble ($$OPENCLAW_ROS2_PREFIX, /opt/ros/humble, or
# ../shared/ros2-humble unpacked into $(VENV)/ros2/ with its apt packages) and the README's robot venv.
# Without any Humble it prints one line and the tier skips (under CI=true the tier then fails).
ROS2_STAMP := $(VENV)/ros2/.prepared-$(shell cat package.xml requirements-humble.txt test/support/humble.py | sha1sum | cut -c1-10)

.PHONY: setup demo test lint clean

# open_clip_torch: its SimpleTokenizer is the tests' reference and its wheel holds CLIP's BPE merges
# file (the tokenizer finds it there). --no-deps and pinned: with its dependencies it would pull
# torchvision and a CUDA torch.
$(STAMP):
	rm -f $(VENV)/.installed-*
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[tools,vlm,text,dev,openvino]'
	$(PY) -m pip install -q --no-deps 'open_clip_torch==$(OPEN_CLIP_VERSION)'
	touch $@

$(TRT_STAMP): $(STAMP)
	rm -rf $(VENV)/trt
	for b in $(TRT_BINDINGS); do $(PY) -m pip install -q --no-deps --target $(VENV)/trt/$${b%%=*} $${b#*=}; done
	touch $@

$(ROS2_STAMP): $(STAMP)
	rm -f $(VENV)/ros2/.prepared-*; mkdir -p $(VENV)/ros2
	$(PY) test/support/humble.py prepare
	touch $@

setup: $(STAMP) $(TRT_STAMP) $(ROS2_STAMP)

demo: setup
	$(PY) -m openclaw_vision.cli demo --out out/demo

lint: setup
	$(PY) -m ruff check .

test: setup lint
	$(PY) -m pytest -q

clean:
	rm -rf out .pytest_cache .ruff_cache
