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
# The llamacpp extra (llama-cpp-python, compiled from its sdist): the tests' tier, not the demo's.
LLAMACPP_REQ := $(shell grep -A1 '^llamacpp =' setup.cfg | tail -1 | tr -d ' ')
# How llama.cpp is compiled (issue 25):
# - only what llama_cpp loads: libllama and libggml* (and llama.cpp's `common` library, compiled but
#   not shipped: llama-cpp-python's CMakeLists FORCE-sets LLAMA_BUILD_COMMON ON, no -D turns it off
#   short of patching the sdist). Not built: the multimodal library mtmd
#   (LLAVA_BUILD; llama_cpp imports it only lazily, for llava chat formats we never use), llama.cpp's
#   tests, tools, examples, server and unified app (OFF when not standalone; said here all the same).
# - no AMX kernels: with -march=native (GGML_NATIVE) GCC defines __AMX_INT8__ on an AMX CPU and ggml
#   compiles its AMX matmul, which dies with SIGILL (`tilezero` in a worker thread) on these Xeons.
#   An explicit -mno-amx-* wins over -march=native in either order and leaves AVX-512/VNNI as they
#   are; GCC accepts the flags on CPUs without AMX too, so one set of flags fits every x86-64 machine.
#   A compiler that does not know the flags (GCC < 11, or not x86) cannot emit AMX code: none are given.
#   Measured with the AMX build here (llama-cpp-python 0.3.36, 2 threads): Q8_0, Q4_0 and Q4_K_M die on
#   every prompt of more than one token; one token at a time their decode ran 1.2x (Q4_0) and 1.75x (Q8_0)
#   faster, F16 ran (prefill 1.2x, decode 1.08x). A build whose every prompt kills the process is no
#   option; revisit when upstream fixes the tile path (the probe, vlm/probe.py, would then pass it).
#   The flags name AMX's features as openclaw_vision/core/cpu.py lists them (`--no-amx-cflags`; see LLAMACPP_ISA).
LLAMACPP_AMX_OFF := $(shell $(PYTHON) -m openclaw_vision.core.cpu --no-amx-cflags)
LLAMACPP_NO_AMX := $(shell echo | cc $(LLAMACPP_AMX_OFF) -E - >/dev/null 2>&1 && echo $(LLAMACPP_AMX_OFF))
LLAMACPP_CMAKE_ARGS := -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  '-DCMAKE_C_FLAGS=$(LLAMACPP_NO_AMX)' '-DCMAKE_CXX_FLAGS=$(LLAMACPP_NO_AMX)'
# llama.cpp compiles for the CPU it is built on (-march=native), and these machines change between
# AVX2-only, AVX-512 VNNI and AMX: the built wheel is kept in a folder named by the CPU's vector
# features and a hash of what decides the code compiled (every target macro the compiler defines for
# -march=native with these flags, and the CMake arguments), never in pip's shared wheel cache: a wheel
# is only installed on the kind of CPU, and with the flags, it was built for; new flags, new wheel.
# The CPU's features are openclaw_vision/core/cpu.py's (the one reader of /proc/cpuinfo, as the llama.cpp
# probe keys its verdicts): standard library only, run from the checkout with the system Python, so
# it answers before the venv or the package exists.
LLAMACPP_ISA := $(shell $(PYTHON) -m openclaw_vision.core.cpu --vector-features)
LLAMACPP_KEY := $(shell (echo | cc -march=native $(LLAMACPP_NO_AMX) -dM -E - | grep -E '^\#define __[A-Z0-9_]+__ 1$$' | sort; echo "$(LLAMACPP_REQ) $(LLAMACPP_CMAKE_ARGS)") | sha1sum | cut -c1-10)
LLAMACPP_WHEELS := $(HOME)/.cache/openclaw-vision/llamacpp-wheels/$(LLAMACPP_ISA)-$(LLAMACPP_KEY)
LLAMACPP_STAMP := $(VENV)/.llamacpp-$(LLAMACPP_KEY)

# `openclaw-vision serve` runs PyTriton in a venv of its own: its release pins numpy<2 (and returns
# empty outputs under NumPy 2), the project's venv has NumPy 2. The `serve` extra of setup.cfg lists it;
# the package itself comes from this checkout (a .pth file), as the editable install does.
SERVE_VENV := $(VENV)/serve
SERVE_STAMP := $(SERVE_VENV)/.installed-$(shell sed -n '/^serve =/,/^[a-z]/p' setup.cfg | sha1sum | cut -c1-10)

# The `ros2` test tier (test/ros2/): a real ROS 2 Humble ($$OPENCLAW_ROS2_PREFIX, /opt/ros/humble, or
# ../shared/ros2-humble unpacked into $(VENV)/ros2/ with its apt packages) and the README's robot venv.
# Without any Humble it prints one line and the tier skips (under CI=true the tier then fails).
ROS2_STAMP := $(VENV)/ros2/.prepared-$(shell cat package.xml requirements-humble.txt test/support/humble.py | sha1sum | cut -c1-10)

.PHONY: setup demo test lint clean llamacpp

# open_clip_torch: its SimpleTokenizer is the tests' reference and its wheel holds CLIP's BPE merges
# file (the tokenizer finds it there). --no-deps and pinned: with its dependencies it would pull
# torchvision and a CUDA torch.
$(STAMP):
	rm -f $(VENV)/.installed-*
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[tools,vlm,text,dev,openvino,triton,memory]'
	$(PY) -m pip install -q --no-deps 'open_clip_torch==$(OPEN_CLIP_VERSION)'
	touch $@

$(TRT_STAMP): $(STAMP)
	rm -rf $(VENV)/trt
	for b in $(TRT_BINDINGS); do $(PY) -m pip install -q --no-deps --target $(VENV)/trt/$${b%%=*} $${b#*=}; done
	touch $@

$(SERVE_STAMP): $(STAMP)
	rm -rf $(SERVE_VENV)
	$(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/python -m pip install -q $$($(PY) -c 'from openclaw_vision.serving.serve import requirements; print(*requirements())')
	echo $(CURDIR) > $$($(SERVE_VENV)/bin/python -c 'import site; print(site.getsitepackages()[0])')/openclaw_vision_src.pth
	touch $@

$(ROS2_STAMP): $(STAMP)
	rm -f $(VENV)/ros2/.prepared-*; mkdir -p $(VENV)/ros2
	$(PY) test/support/humble.py prepare
	touch $@

setup: $(STAMP) $(TRT_STAMP) $(SERVE_STAMP) $(ROS2_STAMP)

# Built once per CPU kind and flags (6.4 min on 2 cores, measured; the former build of every default
# target, mtmd included, took 9.5 min), then installed from that folder in seconds. `make llamacpp`
# alone builds and installs it.
# The wheel replaces whatever llama_cpp the venv had (an older build's wheel has the same version).
$(LLAMACPP_STAMP): $(STAMP)
	rm -f $(VENV)/.llamacpp-*
	ls $(LLAMACPP_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1 || \
	  CMAKE_ARGS="$(LLAMACPP_CMAKE_ARGS)" $(PY) -m pip wheel -q --no-cache-dir --no-deps -w $(LLAMACPP_WHEELS) '$(LLAMACPP_REQ)'
	$(PY) -m pip install -q --no-deps --force-reinstall $(LLAMACPP_WHEELS)/llama_cpp_python-*.whl
	$(PY) -m pip install -q --find-links $(LLAMACPP_WHEELS) --only-binary llama-cpp-python '$(LLAMACPP_REQ)'
	touch $@

llamacpp: $(LLAMACPP_STAMP)

demo: $(STAMP)
	$(PY) -m openclaw_vision.cli demo --out out/demo

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# --durations: the slowest tests in every CI log, where the 20-minute budget of a fresh machine goes
test: setup $(LLAMACPP_STAMP) lint
	$(PY) -m pytest -q --durations=15

clean:
	rm -rf out .pytest_cache .ruff_cache
