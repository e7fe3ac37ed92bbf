"""Bench output: JSON (stable keys), a markdown table with the goals, and PNG plots."""

from __future__ import annotations

import json
from pathlib import Path

from .goals import GOALS, row

#: INT8 encode variants → the runtime whose gate verdict (in the model's metadata) they need.
INT8_RUNTIMES = {"encode/ort-int8": "onnxruntime", "encode/openvino-int8": "openvino"}


def _find(variants: list[dict], name: str, batch: int = 1) -> dict | None:
    return next((v for v in variants if v["name"] == name and v.get("batch", 1) == batch), None)


def best_int8(result: dict) -> tuple[dict | None, list[str]]:
    """The fastest batch-1 INT8 variant whose runtime passed the accuracy gate, and why others were left out.

    ONNX Runtime's verdict may be missing in a model from before per-runtime gates: the file was
    only written because ONNX Runtime passed, so that counts as a pass; any other runtime must
    have been measured."""
    gates = result.get("stages", {}).get("int8_gate_by_runtime") or {}
    ok, excluded = [], []
    for name, rt in INT8_RUNTIMES.items():
        v = _find(result.get("variants", []), name)
        if v is None:
            continue
        gate = gates.get(rt)
        if gate is None and rt != "onnxruntime":
            excluded.append(f"{name} {v['p50_ms']:.1f} ms not counted: model not gated on {rt}")
        elif gate is not None and not gate.get("passed"):
            excluded.append(f"{name} {v['p50_ms']:.1f} ms not counted: gate failed on {rt} ({gate['mean_cosine']})")
        else:
            ok.append(v)
    return (min(ok, key=lambda v: v["p50_ms"]) if ok else None), excluded


def _int8_goals(result: dict) -> list[dict]:
    vs = result.get("variants", [])
    best, excluded = best_int8(result)
    eager, fp32 = _find(vs, "encode/torch-eager-fp32"), _find(vs, "encode/ort-fp32")
    if best is None:
        return []
    note = f"best: {best['name']} {best['p50_ms']:.1f} ms" + "".join(f"; {e}" for e in excluded)
    out = []
    if fp32:
        ratio, target = round(fp32["p50_ms"] / best["p50_ms"], 2), GOALS["int8_vs_ort_fp32"]
        out.append(row(f"best CPU INT8 backend >= {target:g}x ORT FP32 at batch 1 (gated on its runtime)",
                       f"{ratio}x ({note})", ratio >= target))  # fmt: skip
    if eager:
        ratio, target = round(eager["p50_ms"] / best["p50_ms"], 2), GOALS["int8_vs_torch_eager"]
        out.append(row(f"best CPU INT8 backend >= {target:g}x PyTorch eager FP32 at batch 1", f"{ratio}x",
                       ratio >= target))  # fmt: skip
    peak = result.get("stages", {}).get("int8_peak") or {}
    rt = INT8_RUNTIMES[best["name"]]
    if fp32 and peak.get("gops", {}).get(rt):
        ratio = round(fp32["p50_ms"] / best["p50_ms"], 2)
        achieved = peak["model_gflops_per_image"] * 1e3 / best["p50_ms"]
        frac = achieved / peak["gops"][rt]
        vnni = "vnni" in peak["units"] or "amx" in peak["units"]
        where = "" if vnni else " — no VNNI here, so this is not the VNNI peak"
        target = GOALS["int8_vs_ort_fp32_moonshot"]
        out.append(
            row(
                f"moonshot: best CPU INT8 backend >= {target:g}x ORT FP32 (about 65 % of the INT8 VNNI peak)",
                f"{ratio}x; {achieved:.0f} GOP/s = {frac:.0%} of {rt}'s INT8 GEMM peak here, "
                f"{peak['gops'][rt]} GOP/s ({peak['units']}{where})",
                ratio >= target,
            )
        )
    return out


def goals(result: dict) -> list[dict]:
    """Each goal: target, measured, met, and what to say when it is missed."""
    vs = result.get("variants", [])
    out = []
    ours = _find(vs, "preprocess/ours-cpu")
    if ours and "speedup_vs_baseline" in ours:
        cos = result.get("stages", {}).get("preprocess_embedding_cosine_min")
        speedup, min_cos = GOALS["preprocess_speedup"], GOALS["preprocess_cosine"]
        out.append(row(f"preprocess >= {speedup:g}x PIL reference (cosine >= {min_cos:g})",
                       f"{ours['speedup_vs_baseline']}x, cosine {cos}",
                       ours["speedup_vs_baseline"] >= speedup and (cos or 0) >= min_cos))  # fmt: skip
    out += _int8_goals(result)
    out += result.get("vlm_gguf_goals", [])  # measured and judged by bench/vlm.py run_gguf
    out += result.get("cameras", {}).get("goals", [])
    out += result.get("memory", {}).get("goals", [])
    out += result.get("capacity", {}).get("goals", [])
    out += result.get("soak", {}).get("goals", [])
    out += result.get("stop", {}).get("goals", [])
    node = result.get("node")
    if node and node.get("e2e_p99_over_compute_p99") is not None:
        r = node["e2e_p99_over_compute_p99"]
        st = node["stages_ms_at_30fps"]
        where = ", ".join(f"{k} P99 {v['p99']:.1f} ms" for k, v in st.items())
        strict = node.get("e2e_p99_over_isolated_compute_p99")
        target = GOALS["node_overhead"]
        out.append(row(f"node e2e P99 at 30 fps <= {target:g} x (preprocess + encode P99)",
                       f"{r}x" + (f" (vs isolated stage P99: {strict}x)" if strict is not None else ""),
                       r <= target, where_time_goes=where))  # fmt: skip
    tr = result.get("triton")
    if tr:
        target = GOALS["triton_added_p50_ms"]
        out.append(row(f"backend triton with shared memory <= +{target:g} ms P50 over the local backend (loopback,"
                       " batch 1)",
                       f"+{tr['added_p50_ms_shm']} ms (without shared memory: +{tr['added_p50_ms_grpc']} ms)",
                       tr["added_p50_ms_shm"] <= target,
                       where_time_goes="server per request: "
                       + ", ".join(f"{k} {v} ms" for k, v in tr["server_ms_per_request"].items())))  # fmt: skip
    if node and node.get("deserialize_p50_ms_at_30fps") is not None:
        d, target = node["deserialize_p50_ms_at_30fps"], GOALS["deserialize_p50_ms"]
        out.append(row(f"node deserialize P50 <= {target:g} ms (1080p rgb8 at 30 fps)", f"{d:.2f} ms", d <= target))
    return out


def _gguf_lines(g: dict | None) -> list[str]:
    """The VLM's GGUF table (bench/vlm.py run_gguf): one row per language-model backend and format."""
    if not g:
        return []
    if "skipped" in g:
        return ["", f"GGUF / llama.cpp rows skipped: {g['skipped']}"]
    head = "| backend / format | bytes/token (MB) | prefill tok/s | decode tok/s | answer ms | roofline tok/s "
    head += "| fraction | RSS MB | pipeline / alone decode tok/s |"
    lines = ["", f"VLM language model, {g['shape']} ({g['setup']}):", "", head, "|---" * 9 + "|"]
    for r in g["rows"]:
        wrap = (f"{r['pipeline_decode_tokens_per_s']} / {r['llamacpp_alone_decode_tokens_per_s']}"
                if "pipeline_decode_tokens_per_s" in r else "")  # fmt: skip
        lines.append(
            f"| {r['name']} ({r['format']}) | {r['bytes_per_token'] / 1e6:.0f} "
            f"| {r['prefill_tokens_per_s']} "
            f"| {r['decode_tokens_per_s']} | {r['answer_ms']:.0f} | {r['roofline_decode_tokens_per_s']} "
            f"| {r['roofline_fraction']:.0%} | {r['rss_mb']} | {wrap} |"
        )
    return lines


def _capacity(node: dict) -> str:
    """The node's capacity in words: the highest rate kept under 5 % drops, and whether the sender set it."""
    fps = node["max_sustained_fps"]
    if fps is None:
        return "no rate tried kept drops under 5 %"
    floor = " (the sender could not offer more: a floor, not the capacity)" if node["sender_limited"] else ""
    return f"max sustained {fps} fps with < 5 % dropped{floor}"


def markdown(result: dict) -> str:
    lines = [
        f"# openclaw-vision bench ({result['mode']}{', quick' if result.get('quick') else ''})",
        "",
        f"Host: {result['host']['cpu']}, {result['host']['cores']} cores. Model {result.get('model')}, "
        f"backend {result.get('backend')}, precision {result.get('precision')}.",
    ]
    if result.get("variants"):  # the modes that time variants (cameras, capacity and triton have tables of their own)
        lines += [
            "",
            "| variant | batch | P50 ms | P95 ms | P99 ms | throughput (img/s; tokens/s for prefill/decode) | n "
            "| vs baseline |",
            "|---|---|---|---|---|---|---|---|",
        ]
    for v in result.get("variants", []):
        ratio = f"{v['speedup_vs_baseline']}x vs {v['baseline']}" if "speedup_vs_baseline" in v else ""
        name = f"{v['name']} ({v['shape']})" if "shape" in v else v["name"]
        lines.append(
            f"| {name} | {v.get('batch', 1)} | {v['p50_ms']:.2f} | {v['p95_ms']:.2f} | {v['p99_ms']:.2f} "
            f"| {v['throughput']:.1f} | {v['n']} | {ratio} |"
        )
    if result.get("node"):
        n = result["node"]
        lines += [
            "",
            f"Node ({n['backend']}, {n['precision']}): {_capacity(n)}; isolated compute on the same backend "
            f"P50 {n['isolated_compute_ms']['encode']['p50']:.1f} ms encode; CPU "
            f"{n['cpu_percent_mean']} % of one core (mean), peak RSS {n['rss_peak_mb']} MB.",
            "Stages at 30 fps (P50 / P99 ms): "
            + ", ".join(f"{k} {v['p50']:.1f} / {v['p99']:.1f}" for k, v in n["stages_ms_at_30fps"].items()),
        ]
    if result.get("triton"):
        tr = result["triton"]
        b = tr["bytes_per_frame"]
        lines += [
            "",
            f"Triton ({tr['server']}), N clients at once, each its own encoder (P50 / P99 ms, frames/s in all):",
            "",
            "| clients | local | triton, shared memory | triton, pixels over gRPC |",
            "|---|---|---|---|",
        ]
        for row in tr["clients"]:
            cells = [f"{row[k]['p50_ms']} / {row[k]['p99_ms']} ms, {row[k]['frames_per_s']} fps"
                     for k in ("local", "shm", "grpc")]  # fmt: skip
            lines.append(f"| {row['clients']} | " + " | ".join(cells) + " |")
        lines += [
            "",
            f"Bytes per frame: model input {b['model_input']:,} (FP32 NCHW) against a 1080p rgb8 frame's "
            f"{b['frame_1080p_rgb8']:,}; on the socket {b['grpc_request']:,} without shared memory, "
            f"{b['grpc_request_with_shm']:,} with it (shared memory {b['shared_memory']}). Server per request: "
            + ", ".join(f"{k} {v} ms" for k, v in tr["server_ms_per_request"].items())
            + ".",
        ]
    if result.get("roofline"):
        r = result["roofline"]
        lines += [
            "",
            f"Roofline: {r['model_gflops_per_image']} GFLOP/image; "
            f"FP32 GEMM peak {r['gemm_peak_gflops_fp32']} GFLOP/s; "
            f"encoder {r['encoder_achieved_gflops']} GFLOP/s = {r['fraction_of_peak']:.0%} of peak.",
        ]
    if "roofline_fraction" in result:
        r = result["vlm_roofline"]
        lines += [
            "",
            f"VLM decode roofline ({r['shape']}, {r['dtype']}): {r['weight_bytes_per_token'] / 1e9:.2f} GB of "
            f"weights per token / {r['weight_stream_bandwidth_gbs']} GB/s read-only weight stream = "
            f"{r['roofline_decode_tokens_per_s']} tokens/s; "
            f"ours reaches {result['roofline_fraction']:.0%} of it (for reference: "
            f"{r['fraction_of_copy_roofline']:.0%} of a {r['copy_bandwidth_gbs']} GB/s copy-bandwidth roofline).",
            f"Paged KV waste {result['kv_waste_fraction']:.1%} vs contiguous "
            f"{result['contiguous_waste_fraction']:.1%}, "
            f"max-length contiguous {result['contiguous_max_length_waste_fraction']:.1%} "
            f"({result['mix']}).",
            f"Prefix sharing: {result['prefix_sharing_saving']:.0%} of prefill tokens and "
            f"{result['prefix_sharing_time_saving']:.0%} of the time saved ({result['prefix_sharing_setup']}).",
        ]
    lines += _gguf_lines(result.get("vlm_gguf"))
    if result.get("cameras"):
        from .cameras import markdown as cameras_markdown

        lines += cameras_markdown(result["cameras"])
    if result.get("capacity"):
        from .capacity import markdown as capacity_markdown

        lines += capacity_markdown(result["capacity"])
    if result.get("memory"):
        from .memory import markdown as memory_markdown

        lines += memory_markdown(result["memory"])
    if result.get("goals"):
        lines += ["", "| goal | measured | met |", "|---|---|---|"]
        for g in result["goals"]:
            extra = f" ({g['where_time_goes']})" if not g["met"] and "where_time_goes" in g else ""
            lines.append(f"| {g['goal']} | {g['measured']}{extra} | {'yes' if g['met'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plots(result: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    made = []
    vs = [v for v in result.get("variants", []) if v.get("samples_ms")]
    if vs:
        fig, ax = plt.subplots(figsize=(8, 5))
        for v in vs:
            x = np.sort(v["samples_ms"])
            ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=f"{v['name']} (b{v.get('batch', 1)})")
        ax.set_xscale("log")
        ax.set_xlabel("latency (ms, log)")
        ax.set_ylabel("fraction of calls")
        ax.set_title("Latency CDF per variant")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        made.append(_save(plt, fig, out / "latency_cdf.png"))
    node = result.get("node")
    if node:
        stages = node["stages_ms_at_30fps"]
        fig, ax = plt.subplots(figsize=(6, 4))
        bottom = {"P50": 0.0, "P99": 0.0}
        for name, st in stages.items():
            vals = [st["p50"], st["p99"]]
            ax.bar(["P50", "P99"], vals, bottom=[bottom["P50"], bottom["P99"]], label=name)
            bottom["P50"] += vals[0]
            bottom["P99"] += vals[1]
        ax.set_ylabel("ms")
        ax.set_title("Encoder node stages at 30 fps")
        ax.legend(fontsize=8)
        made.append(_save(plt, fig, out / "node_stages.png"))
    if result.get("capacity"):
        from .capacity import cpu_figure

        made.append(_save(plt, cpu_figure(plt, result["capacity"]), out / "capacity_cpu.png"))
    return made


def write(result: dict, out: Path, json_path: Path | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2)
    (out / "bench.json").write_text(text)
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(text)
    (out / "bench.md").write_text(markdown(result))
    plots(result, out)
