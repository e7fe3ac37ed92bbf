"""`openclaw-vision triton-repo`: a Triton model repository for our exports.

One model folder per (precision, runtime) the official Triton container can run:

    <out>/<name>[_<runtime>]/config.pbtxt
    <out>/<name>[_<runtime>]/1/<the ONNX file as exported> (+ its .onnx.data)  or  1/model.plan

(<name> is ViT-B-32_fp32 for ViT-B-32.fp32.onnx; the onnxruntime folder has no suffix, so it is
the model a robot's `backend: triton` asks for by default.)

- `onnxruntime` (platform onnxruntime_onnx) and `openvino` (backend openvino, which reads ONNX
  through `default_model_filename`) serve the very files the node's local backends load;
- `tensorrt` (platform tensorrt_plan) serves an engine from `openclaw-vision build-engine`'s
  cache that was built from exactly this ONNX file (the record's sha256). A plan only runs on the
  GPU model and TensorRT version it was built with, so build it with the server's TensorRT.

Input/output names, element types and dims come from the ONNX file; the batch dimension is
Triton's (`max_batch_size`), with dynamic batching and preferred sizes so that the requests of
several cameras and robots are merged. The model id, precision and sizes go into the config's
`parameters`: what the triton backend checks at start (encoders/triton.py). An INT8 model gets a
folder only for the runtimes whose accuracy gate it passed (its `quant_gate_runtimes` metadata);
TensorRT never gated an INT8 model here, so an INT8 plan is left out with the reason.

Configs are written as protobuf text by hand (no protobuf needed at run time) and parsed with
Triton's own ModelConfig definition in the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core import gate
from ..core.commands import Command, field_flag, from_args
from ..core.errors import OpenclawError
from ..encoders.base import DEFAULT_MAX_BATCH, ModelInfo
from ..encoders.triton import model_name, model_parameters, read_local_info

#: ONNX TensorProto element types → Triton's
ONNX_TO_TRITON = {1: "TYPE_FP32", 10: "TYPE_FP16", 7: "TYPE_INT64", 6: "TYPE_INT32", 3: "TYPE_INT8", 2: "TYPE_UINT8"}
#: how each runtime's folder is declared and which file it loads
RUNTIMES = {
    "onnxruntime": ('platform: "onnxruntime_onnx"', "KIND_CPU"),
    "openvino": ('backend: "openvino"', "KIND_CPU"),
    "tensorrt": ('platform: "tensorrt_plan"', "KIND_GPU"),
}
#: how long the dynamic batcher holds a request for others to join it (µs): a lone camera's frame pays it in
#: full, so it stays well below the +2 ms the triton path may cost; frames that queue behind a running batch
#: are merged whatever the delay
DEFAULT_QUEUE_DELAY_US = 500


class RepoError(OpenclawError, RuntimeError):
    """A repository that cannot be written as asked."""


@dataclass(frozen=True)
class Tensor:
    name: str
    data_type: str
    dims: tuple[int, ...]  # without the batch dimension


def io_of(path: Path) -> tuple[Tensor, Tensor]:
    """The ONNX file's first input and output, as Triton sees them (batch dimension dropped)."""
    from ..models.onnx_files import load_graph

    graph = load_graph(path).graph

    def tensor(v) -> Tensor:
        t = v.type.tensor_type
        dims = tuple(d.dim_value if d.dim_value > 0 else -1 for d in t.shape.dim)[1:]
        if t.elem_type not in ONNX_TO_TRITON:
            raise RepoError(f"{path}: tensor {v.name} has ONNX element type {t.elem_type}, which Triton cannot take")
        return Tensor(v.name, ONNX_TO_TRITON[t.elem_type], dims)

    return tensor(graph.input[0]), tensor(graph.output[0])


def folder_name(path: Path, runtime: str) -> str:
    """The model's name in the repository: ONNX Runtime's folder has the name the triton backend asks
    for by default (encoders/triton.py model_name); the others add their runtime."""
    return model_name(path) if runtime == "onnxruntime" else f"{model_name(path)}_{runtime}"


def preferred_sizes(max_batch: int) -> list[int]:
    """Powers of two from 2 up to max_batch (and max_batch itself): the sizes the batcher aims for."""
    sizes, b = [], 2
    while b < max_batch:
        sizes.append(b)
        b *= 2
    return [*sizes, max_batch] if max_batch > 1 else []


def config_text(name: str, runtime: str, inp: Tensor, out: Tensor, params: dict[str, str], max_batch: int,
                queue_delay_us: int, filename: str, instances: int = 1) -> str:  # fmt: skip
    """The config.pbtxt of one model folder (protobuf text format of Triton's ModelConfig)."""
    declare, kind = RUNTIMES[runtime]

    def io(t: Tensor) -> str:
        return f'  {{ name: "{t.name}" data_type: {t.data_type} dims: [ {", ".join(map(str, t.dims))} ] }}'

    sizes = preferred_sizes(max_batch)
    lines = [
        f'name: "{name}"',
        declare,
        f"max_batch_size: {max_batch}",
        f'default_model_filename: "{filename}"',
        f"input [\n{io(inp)}\n]",
        f"output [\n{io(out)}\n]",
        "dynamic_batching {"
        + (f" preferred_batch_size: [ {', '.join(map(str, sizes))} ]" if sizes else "")
        + f" max_queue_delay_microseconds: {queue_delay_us} }}",
        f"instance_group [ {{ kind: {kind} count: {instances} }} ]",
    ]
    lines += [f'parameters {{ key: "{k}" value: {{ string_value: {json.dumps(v)} }} }}' for k, v in params.items()]
    return "\n".join(lines) + "\n"


def _place(src: Path, dst: Path) -> None:
    """`src` at `dst`: a hard link where the file system allows (no second copy of big weights)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def gate_verdict(info: ModelInfo, runtime: str) -> str | None:
    """None if `info`'s model may be served by `runtime`; else why not (an INT8 gate not passed there).
    The server's own machine may differ from the one that quantised it: the served model's verdict
    travels in its parameters, and the node's gate judges that (encoders/gating.py)."""
    if info.precision != "int8":
        return None
    verdict = gate.verdicts(info.metadata).get(runtime)
    if verdict is None:
        return f"{info.model_id} (INT8) was not gated on {runtime}"
    return None if verdict.passed else f"{info.model_id} (INT8) failed its accuracy gate on {verdict.where()}"


def find_engine(model: Path, cache_root: Path | None) -> tuple[Path, dict] | None:
    """A build-engine engine of exactly this ONNX file (its record's onnx_sha256), newest first."""
    from ..encoders.engine_cache import EngineCache, file_sha256

    folder = EngineCache(cache_root).root / model.name.removesuffix(".onnx")
    records = []
    for rec in folder.glob("*.json"):
        try:
            meta = json.loads(rec.read_text())
        except (OSError, ValueError):
            continue
        if rec.with_suffix(".engine").is_file():
            records.append((rec, meta))
    if not records:
        return None
    digest = file_sha256(model)
    mine = sorted((r for r in records if r[1].get("onnx_sha256") == digest), key=lambda r: r[1].get("built_at", ""))
    return (mine[-1][0].with_suffix(".engine"), mine[-1][1]) if mine else None


def write_repo(models: list[Path], out: Path, runtimes: tuple[str, ...] = tuple(RUNTIMES),
               max_batch: int = DEFAULT_MAX_BATCH, queue_delay_us: int = DEFAULT_QUEUE_DELAY_US,
               engine_cache: Path | None = None) -> dict:  # fmt: skip
    """Write a folder per (model, runtime) under `out`; returns {"written": [...], "skipped": [...]}
    (each skipped entry says why, e.g. an INT8 gate not passed or no engine built)."""
    written, skipped = [], []
    for path in models:
        info = read_local_info(path)
        inp, outp = io_of(path)
        if -1 in inp.dims:
            raise RepoError(f"{path}: input dims {inp.dims} are not static; Triton's batcher needs fixed pixels")
        for rt in runtimes:
            name = folder_name(path, rt)
            why = gate_verdict(info, rt)
            if why:
                skipped.append({"model": name, "why": why})
                continue
            params = model_parameters(info, rt)
            folder = out / name
            batch = min(max_batch, info.max_batch)  # a file with a static batch dimension allows no more
            if rt == "tensorrt":
                found = find_engine(path, engine_cache)
                if found is None:
                    skipped.append({"model": name, "why": f"no build-engine engine of {path.name} (built from this "
                                    "very file) in the engine cache: run `openclaw-vision build-engine` with the "
                                    "server's TensorRT on its GPU, then triton-repo again"})  # fmt: skip
                    continue
                engine, record = found
                batch = min(max_batch, int(record.get("options", {}).get("max_batch", max_batch)))
                _place(engine, folder / "1" / "model.plan")
                filename = "model.plan"
                params = {**params, "tensorrt": str(record.get("tensorrt")), "gpu": str(record.get("gpu"))}
            else:
                filename = path.name
                _place(path, folder / "1" / path.name)
                data = path.with_name(path.name + ".data")
                if data.is_file():
                    _place(data, folder / "1" / data.name)
            (folder / "config.pbtxt").write_text(
                config_text(name, rt, inp, outp, params, batch, queue_delay_us, filename)
            )
            written.append({"model": name, "runtime": rt, "folder": str(folder), "max_batch": batch})
    return {"written": written, "skipped": skipped}


def models_of(model: str) -> list[Path]:
    """What `triton-repo --model M` serves: M's FP32 export (built now if missing) and its INT8 model if one
    was built (quantising is `openclaw-vision quantize`'s, not a side effect of writing a repository)."""
    from ..build_tools.first_use import ensure_fp32
    from ..core.resources import default_model_path
    from ..models.configs import canonical_name

    model = canonical_name(model)
    int8 = default_model_path(model, "int8")
    return [ensure_fp32(model), *([int8] if int8.is_file() else [])]


def _arguments(p: argparse.ArgumentParser) -> None:
    from ..models.configs import DEFAULT_MODEL

    p.add_argument("--model", default=DEFAULT_MODEL, help="its FP32 export (built if missing) and INT8 model if built")
    p.add_argument("--model-path", type=Path, action="append", default=[], help="ONNX file(s) instead (repeatable)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--runtimes", default=",".join(RUNTIMES))
    field_flag(p, "--max-batch", write_repo, help="the batch dimension's limit (Triton's max_batch_size)")
    field_flag(p, "--queue-delay-us", write_repo, help="how long the batcher waits for more requests")
    field_flag(p, "--engine-cache", write_repo, type=Path, help="build-engine's cache (default: the data home's)")


def _run(args: argparse.Namespace) -> int:
    from ..encoders import EncoderError

    try:
        models = list(args.model_path) or models_of(args.model)
        result = from_args(write_repo, args, models=models, runtimes=tuple(args.runtimes.split(",")))
    except (RepoError, EncoderError, FileNotFoundError, KeyError) as err:
        print(f"triton-repo: {err}", file=sys.stderr)
        return 2
    for w in result["written"]:
        print(f"wrote {w['folder']} ({w['runtime']}, batch 1..{w['max_batch']})")
    for sk in result["skipped"]:
        print(f"skipped {sk['model']}: {sk['why']}")
    print(f"serve it: tritonserver --model-repository={args.out.resolve()} (gRPC on 8001)")
    return 0 if result["written"] else 1


#: `openclaw-vision triton-repo`
COMMAND = Command(_arguments, _run)
