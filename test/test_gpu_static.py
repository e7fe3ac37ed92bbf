"""The GPU path, proven as far as a machine without a GPU can prove it (`pytest -m gpu_static`).

- The CUDA kernel compiles for Jetson Orin (sm_87) and Hopper (sm_90) with NVRTC, no spills,
  no double precision; its launch arguments match its parameter list.
- The same kernel source, built with g++ through shim.h under ASan/UBSan, decodes every
  encoding bit for bit as OpenCV does and gives the CPU path's tensor within 3 uint8 levels
  (embedding cosine >= 0.9999 with the tiny model) at 1080p, odd sizes and padded pitch.
- TensorRT: the runner against the real 10.x and 11.x bindings over stub libraries (mypy on
  stubs generated from them, build and run code on autospecced bindings: trt_bindings_cases.py),
  our INT8 model against TensorRT's explicit-quantisation rules, the engine cache.
- The torch GPU encoder's ONNX interpreter against ONNX Runtime, the GPU encoders' buffer logic
  and `backend: auto`, all with the GPU modules absent.
What only a GPU can show is in scripts/gpu_check.py (run on a lent machine).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
from gpu_fakes import HostDevice

from openclaw_vision.preprocess import kernel_plan
from openclaw_vision.preprocess.cpu import CpuPreprocessor
from openclaw_vision.preprocess.cuda import SOURCE, compile_options, kernel_source
from openclaw_vision.preprocess.cuda import shim as shimmod
from openclaw_vision.preprocess.encodings import FrameError
from openclaw_vision.preprocess.frame import Frame
from openclaw_vision.preprocess.kernel_plan import encoding_code, plan_job
from openclaw_vision.preprocess.sample_frames import cpu_reference, every_encoding, pack, pan_frames, with_pitch
from openclaw_vision.preprocess.spec import PreprocessSpec
from openclaw_vision.ros import cdr

pytestmark = pytest.mark.gpu_static

ROOT = Path(__file__).resolve().parents[1]
SPEC = PreprocessSpec()
MAX_LEVELS = 3  # stated tolerance, kernel vs CPU path, per pixel and channel, in uint8 levels
MEAN_LEVELS = 0.5
MIN_COSINE = 0.9999
TRT_VERSIONS = {10: "tensorrt-cu12-bindings==10.16.1.11", 11: "tensorrt-cu13-bindings==11.4.0.106"}


def _need(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        pytest.fail(f"{module} is missing: `make setup` installs what the gpu_static tests need")


# --- frames of every encoding (sample_frames.pack) -------------------------------------------------


def levels(t: np.ndarray, spec=SPEC) -> np.ndarray:
    scale, shift = spec.scale_shift()
    return (t.astype(np.float64) - shift[:, None, None]) / scale[:, None, None]


# --- 1. the kernel compiles for the real targets ----------------------------------------------


def _nvrtc_compile(arch: str) -> tuple[str, str]:
    nvrtc = _need("cuda.bindings.nvrtc")
    err, prog = nvrtc.nvrtcCreateProgram(kernel_source().encode(), b"preprocess.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    opts = [f"--gpu-architecture={arch}".encode(), b"--ptxas-options=-v"]
    opts += [o.encode() for o in compile_options(kernel_plan.ROWS_PER_THREAD)]
    (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    _, n = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * n
    nvrtc.nvrtcGetProgramLog(prog, buf)
    log = buf.decode(errors="replace").rstrip("\0")
    assert res == nvrtc.nvrtcResult.NVRTC_SUCCESS, log
    _, n = nvrtc.nvrtcGetPTXSize(prog)
    ptx = b" " * n
    nvrtc.nvrtcGetPTX(prog, ptx)
    _, n = nvrtc.nvrtcGetCUBINSize(prog)
    assert n > 0  # machine code for the target, not only PTX
    return log, ptx.decode(errors="replace")


@pytest.mark.parametrize("arch", ["sm_87", "sm_90"])
def test_kernel_compiles_for_orin_and_hopper_without_spills_or_doubles(arch):
    log, ptx = _nvrtc_compile(arch)
    funcs = re.findall(r"Function properties for (\w+)\n(.*?)\n.*?Used (\d+) registers", log, re.S)
    found = {name: (int(regs), props) for name, props, regs in funcs}
    assert set(found) == {"preprocess", "decode_rgb8"}, log
    for name, (regs, props) in found.items():
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in props, (name, props)
        assert regs <= 128, (name, regs)  # room for >= 16 warps per SM
        print(f"{arch} {name}: {regs} registers, 0 spills")
    assert ".f64" not in ptx, "double precision in the PTX: every constant and math call must be float"
    assert "cvt.rn.f16.f32" in ptx  # the fp16 store is the hardware conversion


def test_launch_arguments_match_the_kernel_signature():
    """CuPy passes what it is given: the argument list must have the .cu's order and C types."""
    from openclaw_vision.preprocess.gpu import ARG_TYPES, kernel_arguments

    sig = re.search(r'extern "C" __global__ void preprocess\((.*?)\)\s*\{', SOURCE.read_text(), re.S).group(1)
    params = [" ".join(p.split()[:-1]).replace("const ", "") for p in sig.split(",")]
    job = plan_job(1080, 1920, 1920 * 3, "rgb8", SPEC)
    ptrs = [object() for _ in range(7)]
    args = kernel_arguments(job, ptrs[0], tuple(ptrs[1:6]), ptrs[6], half=True, big_endian=False)
    assert len(args) == len(params)
    for p, a in zip(params, args, strict=True):
        if p.endswith("*"):
            assert any(a is q for q in ptrs), p
        else:
            assert type(a) is ARG_TYPES[p], (p, type(a))
    assert args[1] == 1920 * 3 and args[-1] == 1  # step, half_output


# --- 2. the same source on the CPU, under sanitizers --------------------------------------------


@pytest.fixture(scope="session")
def shim_exe(tmp_path_factory) -> Path:
    if shimmod.compiler() is None:
        pytest.fail("g++ is needed to run the CUDA kernel's source on the CPU")
    return shimmod.build(tmp_path_factory.mktemp("shim"), kernel_plan.ROWS_PER_THREAD, sanitize=True)


def _frames_1080(n: int) -> list[np.ndarray]:
    return [np.ascontiguousarray(f) for f in pan_frames(n)]


@pytest.mark.parametrize(("h", "w", "pad"), [(17, 23, 5), (6, 10, 0), (3, 3, 1), (480, 641, 13)])
def test_decoding_is_opencv_bit_for_bit_for_every_encoding(shim_exe, h, w, pad):
    rng = np.random.default_rng(h * w)
    jobs, refs = [], []
    for enc in every_encoding():
        code = encoding_code(enc)
        hh = h + h % 2 if code in (11, 12) else h
        ww = w + w % 2 if code in (5, 6, 11, 12) else w
        rgb = rng.integers(0, 256, (hh, ww, 3), dtype=np.uint8)
        rows, big = pack(rgb, enc, rng)
        if code not in (5, 6, 11, 12):  # random bytes exercise every value (chroma pairs: packed RGB)
            rows = rng.integers(0, 256, rows.shape, dtype=np.uint8)
        raw, step = with_pitch(rows, pad)
        nbytes = kernel_plan.raw_nbytes(hh, ww, step, enc)
        jobs.append(shimmod.decode_job(hh, ww, step, code, nbytes, raw, big))
        refs.append((enc, Frame.from_buffer(raw.tobytes(), hh, ww, step, enc, big_endian=big).to_rgb()))
    for out, (enc, ref) in zip(shimmod.run(shim_exe, jobs), refs, strict=True):
        got = np.frombuffer(out, np.uint8).reshape(ref.shape)
        bad = np.argwhere(got != ref)
        assert bad.size == 0, f"{enc}: {len(bad)} pixels differ from OpenCV, first at {bad[0].tolist()}"


def test_kernel_matches_the_cpu_path_at_1080p_for_every_encoding(shim_exe, tiny_model):
    """One 1080p frame per encoding (each at another point of the camera's pan), padded pitch."""
    from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder

    encs = every_encoding()
    frames = _frames_1080(len(encs))
    rng = np.random.default_rng(0)
    jobs, refs = [], []
    for enc, rgb in zip(encs, frames, strict=True):
        rows, big = pack(rgb, enc, rng)
        raw, step = with_pitch(rows, 7)
        job = plan_job(1080, 1920, step, enc, SPEC, raw.size)
        jobs.append(shimmod.preprocess_job(job, raw, big, half=False))
        refs.append(cpu_reference(raw, 1080, 1920, step, enc, big, SPEC))
    outs = [np.frombuffer(o, np.float32).reshape(3, 224, 224) for o in shimmod.run(shim_exe, jobs)]
    enc_model = OnnxRuntimeEncoder(tiny_model, threads=2)
    a = enc_model.encode(np.stack(outs)).vectors
    b = enc_model.encode(np.stack(refs)).vectors
    cos = (a * b).sum(1)
    report = {}
    for i, enc in enumerate(encs):
        d = np.abs(levels(outs[i]) - levels(refs[i]))
        report[enc] = (round(float(d.max()), 3), round(float(d.mean()), 3), round(float(cos[i]), 6))
        assert d.max() <= MAX_LEVELS + 1e-3 and d.mean() <= MEAN_LEVELS, (enc, report[enc])
        assert cos[i] >= MIN_COSINE, (enc, report[enc])
    print("kernel vs CPU path at 1080p (max levels, mean levels, tiny-model cosine):", json.dumps(report))


@pytest.mark.parametrize(
    ("h", "w", "pad", "size"),
    [(481, 643, 13, 224), (241, 317, 3, 224), (150, 97, 1, 224), (500, 701, 0, 230)],
    ids=["halving-odd", "area-only", "upsampling", "size-230"],
)
def test_kernel_matches_the_cpu_path_at_odd_sizes_and_pitches(shim_exe, h, w, pad, size):
    """Odd sizes (a crop that is not on pixel pairs), padded rows, enlarging, a size not divisible by the row group."""
    spec = PreprocessSpec(size=size)
    rng = np.random.default_rng(h + w)
    base = cv2.resize(_frames_1080(1)[0], (w + 1, h + 1), interpolation=cv2.INTER_AREA)
    jobs, refs = [], []
    for enc in every_encoding():
        code = encoding_code(enc)
        hh = h + h % 2 if code in (11, 12) else h
        ww = w + w % 2 if code in (5, 6, 11, 12) else w
        rows, big = pack(np.ascontiguousarray(base[:hh, :ww]), enc, rng)
        raw, step = with_pitch(rows, pad)
        job = plan_job(hh, ww, step, enc, spec, raw.size)
        jobs.append(shimmod.preprocess_job(job, raw, big, half=False))
        refs.append((enc, cpu_reference(raw, hh, ww, step, enc, big, spec)))
    for out, (enc, ref) in zip(shimmod.run(shim_exe, jobs), refs, strict=True):
        got = np.frombuffer(out, np.float32).reshape(3, size, size)
        d = np.abs(levels(got, spec) - levels(ref, spec))
        assert d.max() <= MAX_LEVELS + 1e-3 and d.mean() <= MEAN_LEVELS, (enc, float(d.max()), float(d.mean()))


def test_half_output_is_the_float_output_rounded_to_fp16(shim_exe):
    rgb = _frames_1080(1)[0][:600, :900].copy()
    job = plan_job(600, 900, 2700, "rgb8", SPEC)
    f32, f16 = shimmod.run(
        shim_exe, [shimmod.preprocess_job(job, rgb, half=False), shimmod.preprocess_job(job, rgb, half=True)]
    )
    a = np.frombuffer(f32, np.float32).reshape(3, 224, 224)
    b = np.frombuffer(f16, np.float16).reshape(3, 224, 224)
    np.testing.assert_array_equal(a.astype(np.float16), b)


def test_each_frame_of_a_batch_lands_in_its_own_row_of_the_input_buffer(shim_exe):
    """A batch of frames of different sizes and encodings, each written by the kernel into row k
    of one (3, 3, S, S) buffer, as the GPU path writes the engine's input: row k is exactly that
    frame's single-frame output and every other row is untouched (under ASan: nothing outside)."""
    rng = np.random.default_rng(5)
    base = _frames_1080(1)[0]
    jobs, singles = [], []
    for h, w, pad, enc in [(1080, 1920, 7, "rgb8"), (480, 640, 3, "nv12"), (151, 97, 0, "mono16")]:
        rgb = cv2.resize(base, (w, h), interpolation=cv2.INTER_AREA)
        rows, big = pack(np.ascontiguousarray(rgb), enc, rng)
        raw, step = with_pitch(rows, pad)
        job = plan_job(h, w, step, enc, SPEC, raw.size)
        jobs.append((job, raw, big))
        singles.append(shimmod.preprocess_job(job, raw, big, half=False))
    single = [np.frombuffer(o, np.float32).reshape(3, 224, 224) for o in shimmod.run(shim_exe, singles)]
    for k, batch in enumerate(shimmod.preprocess_into_batch(shim_exe, jobs)):
        np.testing.assert_array_equal(batch[k], single[k])
        others = np.delete(batch, k, axis=0)
        assert np.isnan(others).all(), f"frame {k} wrote outside its row"


def test_crop_is_the_cpu_paths_crop():
    for h, w in [(1080, 1920), (1081, 1919), (480, 854), (1920, 1080), (301, 203)]:
        for enc in ("rgb8", "yuv422", "mono8"):
            if enc == "yuv422" and w % 2:
                continue
            rows, _ = pack(np.zeros((h, w, 3), np.uint8), enc, np.random.default_rng(0))
            frame = Frame.from_buffer(rows.tobytes(), h, w, rows.shape[1], enc)
            crop, _layout = CpuPreprocessor()._crop(frame)
            x0, y0, x1, y1 = kernel_plan.pixel_crop(h, w, 224, encoding_code(enc))
            assert crop.shape[:2] == (y1 - y0, x1 - x0), (h, w, enc)
            if enc != "yuv422":  # a view: its first byte tells the offset
                off = crop.__array_interface__["data"][0] - frame.pixels.__array_interface__["data"][0]
                assert off == y0 * frame.pixels.strides[0] + x0 * frame.pixels.strides[1], (h, w, enc)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((10, 10, 30, "rgb16", 300), "unsupported encoding 'rgb16' on the GPU path"),
        ((10, 10, 20, "rgb8", 300), "step 20 < width"),
        ((10, 10, 30, "rgb8", 299), "needs 300"),
        ((10, 15, 30, "yuv422", 300), "even width"),
        ((9, 10, 10, "nv12", 150), "even width and height"),
        ((10, 10, 10, "nv12", 149), "needs 150"),
        ((0, 10, 30, "rgb8", 300), "empty image"),
    ],
)
def test_bad_frames_are_clear_errors_before_any_launch(args, message):
    h, w, step, enc, nbytes = args
    with pytest.raises(FrameError, match=message):
        plan_job(h, w, step, enc, SPEC, nbytes)


# --- 3. TensorRT: real bindings over stub libraries -----------------------------------------------

STUB_SYMBOLS = {
    "libnvinfer": [
        "createInferBuilder_INTERNAL",
        "createInferRefitter_INTERNAL",
        "createInferRuntime_INTERNAL",
        "getBuilderPluginRegistry",
        "getPluginRegistry",
    ],
    "libnvinfer_plugin": ["initLibNvInferPlugins"],
    "libnvonnxparser": ["createNvOnnxParser_INTERNAL", "createNvOnnxParserRefitter_INTERNAL", "getNvOnnxParserVersion"],
}


def _bindings_dir(major: int) -> Path:
    d = Path(sys.prefix) / "trt" / str(major)
    if not (d / "tensorrt_bindings").is_dir():
        pytest.fail(f"TensorRT {major} bindings missing in {d}: `make setup` installs {TRT_VERSIONS[major]} there")
    return d


@pytest.fixture(scope="session")
def trt_env(tmp_path_factory):
    """env for a subprocess that imports TensorRT `major`'s real bindings over no-op libraries."""
    libs = tmp_path_factory.mktemp("trt_stub_libs")
    envs = {}
    for major in TRT_VERSIONS:
        out = libs / str(major)
        out.mkdir()
        for lib, symbols in STUB_SYMBOLS.items():
            src = out / f"{lib}.c"
            src.write_text("".join(f"void *{s}(void) {{ return 0; }}\n" for s in symbols))
            so = f"{lib}.so.{major}"
            subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{so}", "-o", str(out / so), str(src)], check=True)
        env = dict(
            os.environ,
            LD_LIBRARY_PATH=str(out),
            PYTHONPATH=f"{_bindings_dir(major)}{os.pathsep}{ROOT}",
            OPENCLAW_TRT_MAJOR=str(major),
        )
        envs[major] = env
    return envs


@pytest.mark.parametrize("major", sorted(TRT_VERSIONS))
def test_tensorrt_runner_on_real_bindings_builds_caches_and_runs(trt_env, major):
    """test/trt_bindings_cases.py, in a process of its own per TensorRT version (one `tensorrt` per process)."""
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "test" / "trt_bindings_cases.py")],
        env=trt_env[major],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
    assert re.search(r"\d+ passed", res.stdout) and "skipped" not in res.stdout, res.stdout[-2000:]


def _split_params(params: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in params:
        depth += 1 if ch in "[(" else -1 if ch in "])" else 0
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [p for p in [*out, cur.strip()] if p]


def valid_stub(text: str) -> str:
    """pybind11-stubgen's output made valid Python where the bindings' C++ names are not:
    a parameter named like a keyword (`in`) gets a trailing underscore, and a required parameter
    after one with a default (pybind11 allows it, Python does not) gets `= ...`."""
    import keyword

    def fix(m: re.Match) -> str:
        params, seen = [], False
        for p in _split_params(m.group(2)):
            name = p.split(":")[0].split("=")[0].strip()
            if keyword.iskeyword(name):
                p = p.replace(name, name + "_", 1)
            if "=" in p:
                seen = True
            elif seen and not name.startswith("*"):
                p += " = ..."
            params.append(p)
        return f"{m.group(1)}({', '.join(params)}) ->"

    return re.sub(r"^(\s*def \w+)\((.*)\) ->", fix, text, flags=re.M)


@pytest.mark.parametrize("major", sorted(TRT_VERSIONS))
def test_tensorrt_runner_type_checks_against_the_real_bindings(trt_env, major, tmp_path):
    """mypy on encoders/tensorrt.py against stubs generated (pybind11-stubgen) from the real bindings."""
    _need("pybind11_stubgen")
    _need("mypy")
    gen = subprocess.run(
        [sys.executable, "-m", "pybind11_stubgen", "tensorrt_bindings.tensorrt", "-o", str(tmp_path / "gen")],
        env=trt_env[major],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert gen.returncode == 0, gen.stderr[-3000:]
    stub = (tmp_path / "gen" / "tensorrt_bindings" / "tensorrt.pyi").read_text()
    pkg = tmp_path / "stubs" / "tensorrt"
    pkg.mkdir(parents=True)
    (pkg / "__init__.pyi").write_text(valid_stub(stub) + "\n__version__: str\n")
    assert ("INT8" in stub.split("class BuilderFlag")[1].split("class ")[0]) == (major == 10)
    # the stub's own oddities (C++ types pybind11 could not name) are not ours to fix: only our code is checked
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nfollow_imports = silent\nignore_missing_imports = True\n[mypy-tensorrt]\nignore_errors = True\n"
    )
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(tmp_path / "mypy.ini"),
        "--no-error-summary",
        "--cache-dir",
        str(Path(sys.prefix) / ".mypy_cache" / str(major)),
        str(ROOT / "openclaw_vision" / "encoders" / "tensorrt.py"),
    ]
    res = subprocess.run(
        cmd,
        env=dict(os.environ, MYPYPATH=str(tmp_path / "stubs")),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stdout[-5000:]


# --- 4. our INT8 model under TensorRT's explicit-quantisation rules ------------------------------


def _mutate(path: Path, fn) -> onnx.ModelProto:
    m = onnx.load(str(path))
    fn(m, {i.name: i for i in m.graph.initializer})
    return m


def test_our_int8_model_keeps_tensorrts_explicit_quantisation_rules(int8_model):
    _need("onnx_graphsurgeon")
    from openclaw_vision.encoders.trt_rules import explicit_quantisation_problems

    assert explicit_quantisation_problems(int8_model) == []


def _set(init, values):
    from onnx import numpy_helper

    init.CopyFrom(numpy_helper.from_array(np.asarray(values), init.name))


def _first(m, op, pick=lambda n: True):
    return next(n for n in m.graph.node if n.op_type == op and pick(n))


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("zero_point_one", "is not 0"),  # polygraphy's lint lets this through; TensorRT rejects it
        ("uint8_zero_point", "zero point is uint8"),
        ("no_zero_point", "no zero point"),
        ("zero_scale", "finite and > 0"),
        ("wrong_axis", "quantised along axis 0, its output channels are axis 1"),
        ("per_channel_activation", "per-channel scales on an activation"),
    ],
)
def test_each_explicit_quantisation_rule_is_enforced(int8_model, breakage, message):
    _need("onnx_graphsurgeon")
    from onnx import numpy_helper

    from openclaw_vision.encoders.trt_rules import explicit_quantisation_problems

    def act_q(m):
        return _first(m, "QuantizeLinear")

    def weight_dq(m, inits):
        return _first(m, "DequantizeLinear", lambda n: n.input[0] in inits and len(inits[n.input[0]].dims) == 2)

    def brk(m, inits):
        if breakage == "zero_point_one":
            _set(inits[act_q(m).input[2]], np.int8(1))
        elif breakage == "uint8_zero_point":
            _set(inits[act_q(m).input[2]], np.uint8(0))
        elif breakage == "no_zero_point":
            del act_q(m).input[2]
        elif breakage == "zero_scale":
            _set(inits[act_q(m).input[1]], np.float32(0))
        elif breakage == "wrong_axis":
            dq = weight_dq(m, inits)
            w = numpy_helper.to_array(inits[dq.input[0]])
            k = min(w.shape)
            _set(inits[dq.input[0]], w[:k, :k])  # square: the scale count fits either axis, only the axis is wrong
            _set(inits[dq.input[1]], numpy_helper.to_array(inits[dq.input[1]])[:k])
            _set(inits[dq.input[2]], np.zeros(k, np.int8))
            next(a for a in dq.attribute if a.name == "axis").i = 0
        elif breakage == "per_channel_activation":
            q = act_q(m)
            _set(inits[q.input[1]], np.full(3, 0.1, np.float32))
            _set(inits[q.input[2]], np.zeros(3, np.int8))

    problems = explicit_quantisation_problems(_mutate(int8_model, brk))
    assert any(message in p for p in problems), problems


def test_an_fp32_model_is_not_mistaken_for_a_quantised_one(tiny_model):
    _need("onnx_graphsurgeon")
    from openclaw_vision.encoders.trt_rules import explicit_quantisation_problems

    assert "no QuantizeLinear" in explicit_quantisation_problems(tiny_model)[0]


# --- 5. engine cache, backend choice, GPU encoder logic: no GPU module needed ----------------------


def _key(**kw):
    from openclaw_vision.encoders.engine_cache import BuildOptions, EngineKey

    base = {
        "onnx_sha256": "a" * 64,
        "gpu": "NVIDIA H200",
        "compute_capability": "9.0",
        "tensorrt": "10.16.1.11",
        "options": BuildOptions(8, 1024, "int8+fp16"),
    }
    return EngineKey(**{**base, **kw})


def test_engine_key_changes_with_everything_an_engine_depends_on():
    from openclaw_vision.encoders.engine_cache import BuildOptions

    k = _key()
    variants = [
        _key(onnx_sha256="b" * 64),
        _key(gpu="Orin"),
        _key(compute_capability="8.7"),
        _key(tensorrt="11.4.0.106"),
        _key(options=BuildOptions(1, 1024, "int8+fp16")),
        _key(options=BuildOptions(8, 1024, "strong")),
    ]
    assert len({k.digest, *(v.digest for v in variants)}) == 1 + len(variants)
    assert _key().digest == k.digest  # and nothing else (no time, no path)
    assert BuildOptions().resolved(10).typing == "int8+fp16" and BuildOptions().resolved(11).typing == "strong"
    with pytest.raises(ValueError, match="TensorRT 11 has no INT8/FP16 builder flags"):
        BuildOptions(typing="int8+fp16").resolved(11)


def test_cache_returns_a_valid_engine_and_refuses_a_corrupt_or_foreign_one(tmp_path, caplog):
    from openclaw_vision.encoders.engine_cache import EngineCache

    cache, key = EngineCache(tmp_path), _key()
    assert cache.load("m", key) is None and not caplog.records  # nothing there: no noise either
    path = cache.store("m", key, b"ENGINE" * 100, onnx_path="m.onnx")
    assert cache.load("m", key) == b"ENGINE" * 100
    rec = json.loads(path.with_suffix(".json").read_text())
    assert rec["tensorrt"] == "10.16.1.11" and rec["gpu"] == "NVIDIA H200" and rec["options"]["max_batch"] == 8
    with caplog.at_level(logging.WARNING):
        path.write_bytes(b"ENGINE" * 50)  # truncated by a crash or a full disk
        assert cache.load("m", key) is None
        assert "corrupt" in caplog.text and caplog.text.count("\n") == 1
        caplog.clear()
        cache.store("m", key, b"E")
        path.with_suffix(".json").write_text("{not json")
        assert cache.load("m", key) is None and "no readable record" in caplog.text
        caplog.clear()
        cache.store("m", _key(gpu="Orin"), b"E")  # an engine copied in under our name from another machine
        other, _ = cache.paths("m", _key(gpu="Orin"))
        path.write_bytes(other.read_bytes())
        path.with_suffix(".json").write_text(other.with_suffix(".json").read_text())
        assert cache.load("m", key) is None and "GPU Orin -> NVIDIA H200" in caplog.text


def test_a_stale_engine_is_named_with_what_changed(tmp_path, caplog):
    from openclaw_vision.encoders.engine_cache import EngineCache

    cache = EngineCache(tmp_path)
    cache.store("m", _key(tensorrt="10.3.0"), b"old")
    with caplog.at_level(logging.WARNING):
        assert cache.load("m", _key()) is None
    assert "stale or foreign" in caplog.text and "TensorRT 10.3.0 -> 10.16.1.11" in caplog.text
    assert len(caplog.records) == 1


def test_tensorrt_module_imports_and_says_so_without_tensorrt(tiny_model, monkeypatch):
    import openclaw_vision.encoders.tensorrt as trtmod
    from openclaw_vision.encoders import EncoderError

    monkeypatch.setattr(trtmod, "trt", None)
    with pytest.raises(EncoderError, match="TensorRT is not installed"):
        trtmod.TensorRTEncoder(tiny_model)
    assert trtmod.build_engine_cli(tiny_model, trtmod.BuildOptions(), None, False) == 2


def test_backend_auto_takes_the_first_usable_and_logs_which_and_why(tiny_model, monkeypatch, caplog):
    import openclaw_vision.encoders as encs

    with caplog.at_level(logging.INFO, logger="openclaw_vision.encoders"):
        enc = encs.create_encoder("auto", tiny_model, threads=1)
    assert enc.backend in ("openvino", "onnxruntime")  # a CPU backend: this machine has no CuPy, no TensorRT
    text = caplog.text
    assert "tensorrt not usable" in text and "torch not usable" in text
    assert f"encoder backend {enc.backend} (auto, first usable of tensorrt > torch > openvino > onnxruntime" in text

    built = []

    def fake_build(name, path, options):
        built.append((name, options.gate))
        if name == "tensorrt":
            raise RuntimeError("CUDA driver too old")
        return _FakeEncoder(name)

    rows = tuple(
        replace(b, usable=lambda: (True, "test"), build=lambda p, o, n=b.name: fake_build(n, p, o))
        for b in encs.backends.TABLE
    )
    monkeypatch.setattr(encs.backends, "TABLE", rows)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="openclaw_vision.encoders"):
        enc = encs.create_encoder("auto", tiny_model)
    assert built == [("tensorrt", "require"), ("torch", "require")] and enc.backend == "torch"  # auto's INT8 policy
    assert "tensorrt failed to start (RuntimeError('CUDA driver too old')); trying the next backend" in caplog.text
    built.clear()
    with pytest.raises(RuntimeError, match="driver"):  # configured explicitly: no silent fallback
        encs.create_encoder("tensorrt", tiny_model)


class _FakeEncoder:
    model_id, embed_dim, image_size, precision = "fake", 32, 224, "fp16"

    def __init__(self, backend):
        from openclaw_vision.encoders.base import ModelInfo

        self.backend = backend
        self.info = ModelInfo(self.model_id, self.precision, self.image_size, self.embed_dim)


def test_auto_probes_do_not_import_torch_without_a_gpu():
    """On CPU machines `auto` must not pay torch's import (seconds, hundreds of MB) to learn there is no GPU."""
    code = (
        "import json, sys; sys.modules['cupy'] = None; "  # as if CuPy were not installed
        "import openclaw_vision.encoders as e; r = {b.name: b.usable() for b in e.backends.auto_order()}; "
        "print(json.dumps([r, 'torch' in sys.modules]))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    reasons, torch_imported = json.loads(res.stdout.strip().splitlines()[-1])
    assert reasons["onnxruntime"][0] is True
    assert reasons["torch"][0] is False and "CuPy is not installed" in reasons["torch"][1]
    assert not torch_imported


def test_torch_graph_runs_our_onnx_as_onnx_runtime_does(tiny_model, int8_model):
    import onnxruntime as ort
    import torch

    from openclaw_vision.core.ortsession import session_options
    from openclaw_vision.encoders.torch_onnx import OnnxTorchGraph

    x = np.stack([CpuPreprocessor()(Frame.from_rgb(f)) for f in pan_frames(3, 640, 480)])
    for path, dtype, min_cos in [
        (tiny_model, torch.float32, 0.999999),
        (tiny_model, torch.float16, 0.9999),
        (int8_model, torch.float32, 0.9999),
    ]:
        sess = ort.InferenceSession(str(path), session_options(1), providers=["CPUExecutionProvider"])
        ref = sess.run(None, {"pixel_values": x})[0]
        got = OnnxTorchGraph(path, "cpu", dtype)(torch.from_numpy(x)).float().numpy()
        cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
        assert cos.min() >= min_cos, (path.name, dtype, cos)


def test_gpu_encoder_uses_its_input_buffer_without_a_copy_and_copies_host_batches(tiny_model):
    """The torch encoder's wrapper on the host stand-in: the buffer, copy and batching logic."""
    from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder
    from openclaw_vision.encoders.torch_cuda import TorchCudaEncoder

    dev = HostDevice()
    enc = TorchCudaEncoder(tiny_model, device=dev, max_batch=2)
    ref = OnnxRuntimeEncoder(tiny_model, threads=1)
    x = np.stack([CpuPreprocessor()(Frame.from_rgb(f)) for f in pan_frames(3, 640, 480)])
    got = enc.encode(x)  # 3 frames, batches of 2: chunked
    assert got.vectors.shape == (3, 32) and dev.calls.count("upload") == 2
    np.testing.assert_allclose(got.vectors, ref.encode(x).vectors, atol=1e-5)
    dev.calls.clear()
    enc.input[0] = x[1]  # what the preprocessing kernel does through frame_preprocessor()
    one = enc.encode(enc.input[0][None])
    assert "upload" not in dev.calls and "copy" not in dev.calls and dev.calls[-2:] == ["download", "sync"]
    np.testing.assert_allclose(one.vectors[0], got.vectors[1], atol=1e-5)
    with pytest.raises(Exception, match=r"expected pixels \(N, 3, 224, 224\)"):
        enc.encode(np.zeros((1, 3, 100, 100), np.float32))


def test_the_encoder_node_lets_a_gpu_encoder_preprocess_into_its_own_buffer(tiny_model):
    """The seam: a GPU encoder's declared frame_preprocessor replaces the CPU one in FramePipeline;
    frame k of a batch is written into row k of the encoder's input and encoded without a copy
    (here the CPU preprocessor stands in for the CUDA kernel behind BoundPreprocessor)."""
    from unittest import mock

    from openclaw_vision.encoders.base import ImageEncoder
    from openclaw_vision.encoders.gpu_common import BoundPreprocessor
    from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder
    from openclaw_vision.encoders.torch_cuda import TorchCudaEncoder
    from openclaw_vision.ros.encoder_node import EncoderNode
    from openclaw_vision.runtime.config import EncoderConfig

    dev = HostDevice()
    enc = TorchCudaEncoder(tiny_model, device=dev, max_batch=2)
    assert isinstance(enc, ImageEncoder)
    enc.frame_preprocessor = lambda: BoundPreprocessor(CpuPreprocessor(), enc.input)
    cfg = EncoderConfig(image_topics=("/a/image_raw", "/b/image_raw"))
    node = EncoderNode(cfg, mock.MagicMock(), enc)
    frames = [Frame.from_rgb(f) for f in pan_frames(3, 640, 480)]
    frames[1] = Frame.from_rgb(cv2.resize(frames[1].pixels, (320, 200)))  # another size in the same batch

    def header(frame_id: str, sec: int) -> cdr.Header:
        return cdr.Header(cdr.Time(sec, 0), frame_id)

    node._encode_batch([("/a/image_raw", (frames[0], header("a", 1), 0.0)),
                        ("/b/image_raw", (frames[1], header("b", 2), 0.0))])  # fmt: skip
    assert "upload" not in dev.calls and "copy" not in dev.calls
    made = [c.kwargs for c in node.transport.msg.return_value.call_args_list]  # Time, Header, VisualFeatures each
    published = [m for m in made if "dim" in m]
    assert [(m["frame_id"]) for m in made if "frame_id" in m] == ["a", "b"]  # each frame's header, in batch order
    assert [m["sec"] for m in made if "sec" in m] == [1, 2]
    assert len(published) == 2 and all(p["dim"] == 32 for p in published)
    assert {k: c["encoded"] for k, c in node.stats()["cameras"].items()} == {"/a/image_raw": 1, "/b/image_raw": 1}
    ref = OnnxRuntimeEncoder(tiny_model, threads=1).encode(np.stack([CpuPreprocessor()(f) for f in frames[:2]]))
    got = np.stack([node.transport.float_array.call_args_list[i].args[0] for i in range(2)])
    np.testing.assert_allclose(got, ref.vectors, atol=1e-5)
    # a smaller batch runs at its own size: one frame, rows [0, 1) only
    dev.calls.clear()
    node._encode_batch([("/b/image_raw", (frames[2], header("b", 3), 0.0))])
    assert "upload" not in dev.calls and node.stats()["cameras"]["/b/image_raw"]["encoded"] == 2


def test_build_engine_command_without_tensorrt_says_so(tiny_model, capsys):
    from openclaw_vision import cli

    assert cli.main(["build-engine", "--model-path", str(tiny_model)]) == 2
    assert "TensorRT is not installed here" in capsys.readouterr().err
    assert cli.main(["build-engine", "--model-path", str(tiny_model.with_name("missing.onnx"))]) == 2


def test_the_gpu_path_reads_a_frames_bytes_in_place_with_their_row_step():
    from openclaw_vision.preprocess.gpu import raw_bytes

    rows, _ = pack(np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3), "bgr8", np.random.default_rng(0))
    raw, step = with_pitch(rows, 11)
    frame = Frame.from_buffer(raw, 5, 7, step, "bgr8")
    flat, got_step = raw_bytes(frame)
    assert got_step == step == 32 and flat.size == step * 4 + 7 * 3  # up to the last pixel: no copy of padding
    assert np.shares_memory(flat, raw) and np.array_equal(flat, raw[: flat.size])
    other = Frame(np.arange(12, dtype=np.uint16).reshape(3, 4), "mono16")  # not a byte view: copied, tight rows
    flat, got_step = raw_bytes(other)
    assert got_step == 8 and flat.tobytes() == other.pixels.tobytes()


def test_the_kernel_source_is_installed_with_the_package():
    """pip installs preprocess/cuda/*.cu via package_data; colcon's ament_python_install_package copies the
    whole package folder (ament/ament_cmake, humble, ament_cmake_python/cmake/ament_python_install_package.cmake
    lines 181-186: install(DIRECTORY <package>/ ... PATTERN *.pyc EXCLUDE))."""
    import configparser
    import fnmatch

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    patterns = [p.strip() for p in cfg["options.package_data"]["openclaw_vision.preprocess.cuda"].split(",")]
    for f in ("preprocess.cu", "shim.h", "shim_main.cpp"):
        assert (SOURCE.parent / f).is_file() and any(fnmatch.fnmatch(f, p) for p in patterns), f
