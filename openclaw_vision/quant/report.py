"""The quantisation report: report.json (stable keys), report.md, and PNG plots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..core.gate import Check


def markdown(r: dict) -> str:
    verdict = "PASSED" if r["passed"] else "FAILED — no model written"
    lines = [
        f"# INT8 quantisation report: {r['model']} — {verdict}",
        "",
        f"Model: `{r['model']}` ({r['model_note']}). Scheme {r['scheme']} (Q/DQ, per-channel INT8 weights, "
        f"per-tensor activations). Calibration: {r['calibration']['method']} on {r['calibration']['frames']} frames "
        f"from `{r['calibration']['source']}`; {r['calibration']['heldout_frames']} held-out frames.",
        "",
        "## Gate (held-out frames, worst over the rows)",
        "",
        "| check | measured | required |",
        "|---|---|---|",
        *[f"| {c.name} | {c.format(v)} | {_requirement(v, c, r)} |" for c, v in _checks(r)],
        *_text_collapse_rows(r),
        "",
        *table(r, "row", [(res, m, None) for res, m in r["per_resolution"].items()]),
    ]
    lines += runtime_rows(r)
    lines += [
        "",
        "## What stayed in float, and why",
        "",
        f"- By construction: {r['float_by_construction']} (quantising them is what collapses ViT accuracy).",
        f"- Chosen by the partition: {len(r['kept_float'])} of {r['layers']} MatMul/Gemm/Conv layers "
        f"(limit {r['max_float']}): {', '.join(r['kept_float_labels']) or 'none — every weight layer is INT8'}.",
        "",
        *table(r, "layers kept float", [(str(t["keep_float"]), t, t["passed"]) for t in r["trials"]]),
        *_migration_lines(r),
        "",
        "## Calibration methods (all layers INT8)",
        "",
        *table(r, "method", [(name, m["worst"], m["passed"]) for name, m in r["methods"].items()]),
    ]
    lines += _local_section(r)
    if r["sensitivity"]:
        lines += [
            "",
            "## Sensitivity, end to end (each layer quantised alone, native resolution)",
            "",
            "![sensitivity](sensitivity.png)",
            "",
            "Damage (1 − mean cosine) summed by role: "
            + ", ".join(f"{k} {v:.2e}" for k, v in sorted(r["sensitivity_by_role"].items(), key=lambda kv: -kv[1])),
            "",
            "| layer | role | block | mean cos | min cos | KL |",
            "|---|---|---|---|---|---|",
        ]
        for s in sorted(r["sensitivity"], key=lambda s: s["mean_cosine"]):
            lines.append(
                f"| {s['label']} | {s['role']} | {s['block']} | {s['mean_cosine']:.7f} | {s['min_cosine']:.7f} "
                f"| {s['kl']:.3g} |"
            )
    else:
        sw = r["sweep"]
        lines += [
            "",
            f"End-to-end sweep not run ({sw['mode']}: estimated {sw['estimated_s']} s, budget {sw['budget_s']} s);"
            f" the partition ranked layers by {r['ranking']}.",
        ]
    size, mem = r["size_mb"], r.get("memory") or {}
    lines += [
        "",
        "## Size, memory, batch invariance, speed",
        "",
        f"- Model file: FP32 {size['fp32']} MB, INT8 {size['int8']} MB ({size['cut_percent']} % smaller).",
    ]
    if mem:
        lines.append(
            f"- Session memory (peak RSS of a fresh process over load and one run, minus its baseline): FP32"
            f" {mem['fp32']['session_mb']} MB, INT8 {mem['int8']['session_mb']} MB"
            f" ({100 * (mem['int8']['session_mb'] / mem['fp32']['session_mb'] - 1):+.1f} %); resident afterwards:"
            f" FP32 {mem['fp32'].get('steady_mb')} MB, INT8 {mem['int8'].get('steady_mb')} MB."
        )
    lat = r["latency_b1_ms"]
    lines += [
        f"- Same frames at batch 1 and batch 8: max |difference| {r['batch_invariance_max_abs']} (static Q/DQ).",
        f"- Batch-1 latency here (indicative, interleaved): FP32 {lat['fp32']} ms, INT8 {lat['int8']} ms "
        f"({lat['fp32'] / lat['int8']:.2f}x); `openclaw-vision bench --mode stages` is the reference measurement.",
        "",
        "## Time and memory per phase",
        "",
        "| phase | seconds | peak RSS (GB) |",
        "|---|---|---|",
        *[f"| {p['name']} | {p['seconds']} | {p['peak_rss_mb'] / 1e3:.2f} |" for p in r["phases"]],
        "",
        f"Took {r['seconds']} s; peak RSS {r['peak_rss_mb'] / 1e3:.2f} GB (this process; session memory above is"
        " measured in fresh child processes, one at a time).",
    ]
    return "\n".join(lines) + "\n"


def _migration_lines(r: dict) -> list[str]:
    """Each migrated layer with its alpha (quant/smooth.py), and the INT8 share of the GEMM FLOPs."""
    mig = r.get("migration") or {}
    lines = ["", f"GEMM FLOPs that run INT8: {100 * r.get('int8_flop_share', 1.0):.1f} %.", ""]
    if not mig.get("on"):
        return [*lines, "Outlier migration: off (--no-smooth)."]
    lines += [
        f"## Outlier migration (LayerNorm → GEMM): {mig['migrated']} of {mig['migratable']} activations migrated",
        "",
        "| layers | alpha | local cosine, plain | local cosine, migrated | factors |",
        "|---|---|---|---|---|",
    ]
    for m in mig["layers"]:
        fac = "—" if m["alpha"] is None else f"{m['min_factor']:.3g}–{m['max_factor']:.3g}"
        alpha = "not migrated" if m["alpha"] is None else f"{m['alpha']}"
        lines.append(f"| {', '.join(m['layers'])} | {alpha} | {m['local_cosine_plain']:.6f} | {m['local_cosine']:.6f}"
                     f" | {fac} |")  # fmt: skip
    splits = (r.get("split") or {}).get("layers") or []
    if splits:
        lines += ["", "## FC2 outlier units computed apart in FP32 (quant/split.py)", "",
                  "| layer | units | their |max| | median unit's |max| |", "|---|---|---|---|"]  # fmt: skip
        lines += [f"| {sp['layer']} | {sp['units']} | {sp['unit_absmax']} | {sp['median_absmax']} |" for sp in splits]
    centres = (r.get("centre") or {}).get("layers") or []
    if centres:
        lines += ["", "## FC2 inputs centred for s8s8 (quant/centre.py)", "",
                  "| layer | shift c | range before | step vs symmetric |", "|---|---|---|---|"]  # fmt: skip
        lines += [f"| {ce['layer']} | {ce['shift']} | {ce['range']} | {ce['step_ratio']} |" for ce in centres]
    return lines


def _checks(r: dict) -> list[tuple[Check, float | None]]:
    """The gate's checks as the run had them (report.json's `gate.checks`), with their measured values."""
    return [
        (Check(c["name"], c["metric"], c.get("bound"), c.get("label", "")), c["value"]) for c in r["gate"]["checks"]
    ]


def table(r: dict, first: str, rows: list[tuple[str, dict, bool | None]]) -> list[str]:
    """A markdown table of metric rows: one column per gate check measured in any row (GateSpec.checks' order
    and formats), and a gate column where rows carry a verdict. Every table of metrics in the report is this one."""
    cols = [c for c, _ in _checks(r) if any(m.get(c.metric) is not None for _, m, _ in rows)]
    verdicts = any(v is not None for _, _, v in rows)
    head = [first, *[c.label or c.name for c in cols], *(["gate"] if verdicts else [])]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m, passed in rows:
        cells = [name, *[c.format(m.get(c.metric)) for c in cols]]
        if verdicts:
            cells.append("pass" if passed else "FAIL")
        out.append("| " + " | ".join(cells) + " |")
    return out


def runtime_rows(r: dict) -> list[str]:
    """The gate once per runtime on the final model: each rounds the same Q/DQ model its own way."""
    rows = r.get("gate_by_runtime") or {}
    if not rows:
        return []
    return [
        "",
        "The same model on each installed runtime (an INT8 model runs only where it passed here):",
        "",
        *table(r, "runtime", [(rt, m, m["passed"]) for rt, m in rows.items()]),
    ]


def _text_collapse_rows(r: dict) -> list[str]:
    """The collapse metric's text term and the CMCD (both terms), beside the gate's checks."""
    c = r["collapse"]
    return [
        f"| collapse degree, text term | {c['text']:.3g} | ({c['text_note']}) |",
        f"| cross-modal collapse degree (CMCD, both terms) | {c['cmcd']:.3g} | (reported) |",
    ]


def _requirement(value: float | None, check: Check, r: dict) -> str:
    """The check's bound; for a text-tower check without a text tower, why it was not measured."""
    if value is None:
        return (r.get("zero_shot") or {}).get("note", "not computed")
    return check.requirement()


ROLES = ("qkv", "attn_out", "mlp_fc", "mlp_proj")


def _local_section(r: dict) -> list[str]:
    """The one-pass local sensitivity: per-block SQNR table and a summary of where the model is fragile."""
    local = r.get("sensitivity_local") or []
    if not local:
        return []
    blocks = r["sensitivity_blocks"]
    inner = [b for b in blocks if b["block"] >= 0]
    outside = {s["role"]: s["sqnr_db"] for s in local if s["block"] < 0}
    lines = [
        "",
        "## Sensitivity, local (each layer's output SQNR under its own INT8, one pass)",
        "",
        f"SQNR = 10·log10(Σy² / Σ(y_int8 − y)²) of each layer's output with its own input and weight quantised"
        f" (everything before it float), over {r['sensitivity_local_frames']} calibration frames. Lower = more"
        f" disturbed. Partition ranking used: {r['ranking']}."
        + (
            f" Agreement with the end-to-end sweep's ranking (Spearman): {r['rank_agreement']}."
            if r.get("rank_agreement") is not None
            else ""
        ),
        "",
        "Outside the blocks: " + ", ".join(f"{k} {v} dB" for k, v in outside.items()),
        "",
    ]
    if inner:
        by_role = {role: [b[role] for b in inner if b.get(role) is not None] for role in ROLES}
        q = max(1, len(inner) // 4)
        early, late = inner[:q], inner[-q:]
        lines += [
            "Mean SQNR by role: "
            + ", ".join(f"{role} {np.mean(v):.1f} dB" for role, v in by_role.items() if v)
            + f". First {q} blocks' worst layer, mean {np.mean([b['worst_db'] for b in early]):.1f} dB;"
            f" last {q} blocks' {np.mean([b['worst_db'] for b in late]):.1f} dB.",
            "",
            "| block | " + " | ".join(ROLES) + " | worst |",
            "|---|" + "---|" * (len(ROLES) + 1),
        ]
        for b in inner:
            lines.append(f"| {b['block']} | " + " | ".join(f"{b.get(k, '')}" for k in ROLES) + f" | {b['worst_db']} |")
    return lines


_ROLE_COLOURS = {"patch_embed": "C0", "qkv": "C1", "attn_out": "C2", "mlp_fc": "C3", "mlp_proj": "C4", "proj": "C5"}


def plot_sensitivity(r: dict, path: Path) -> Path | None:
    if not r["sensitivity"]:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sens = r["sensitivity"]
    fig, ax = plt.subplots(figsize=(max(8, len(sens) * 0.18), 4.5))
    damage = [max(1 - s["mean_cosine"], 1e-9) for s in sens]
    ax.bar(range(len(sens)), damage, color=[_ROLE_COLOURS.get(s["role"], "C7") for s in sens])
    ax.set_yscale("log")
    ax.set_xticks(range(len(sens)), [s["label"] for s in sens], rotation=90, fontsize=6)
    ax.set_ylabel("1 − mean cosine vs FP32 (log)")
    ax.set_title(f"Damage of quantising each layer alone — {r['model']}")
    for role, colour in _ROLE_COLOURS.items():
        ax.bar([0], [0], color=colour, label=role)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(result, out: Path) -> list[Path]:
    """report.json, report.md and the plot of a `QuantResult` into `out`."""
    r = result.as_dict()
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "report.json", out / "report.md"]
    paths[0].write_text(json.dumps(r, indent=2))
    paths[1].write_text(markdown(r))
    plot = plot_sensitivity(r, out / "sensitivity.png")
    return paths + ([plot] if plot else [])
