"""The INT8 figures command (issue 35): one command prints profiles × {plain, ours, NNCF} × {cosine, zero-shot,
INT8 share, latency} as JSON and markdown, and `--latency-only` times again only the groups it is asked to.

On the tiny tower (seconds a group). Latency values are not judged (tests never time): only that each row has
the columns its group can give, and that a group not asked to be timed again keeps its columns as they were.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nncf")
pytest.importorskip("openvino")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "int8_figures.py"


def figures(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_one_command_prints_the_table_and_latency_only_times_the_groups_asked(tmp_path: Path):
    first = tmp_path / "first.json"
    out = figures("--models", "tiny", "--profiles", "none", "clip-like", "--frames", "16", "--batches", "1",
                  "--latency-budget-s", "0.5", "--out", str(tmp_path / "models"), "--json", str(first),
                  cwd=tmp_path)  # fmt: skip
    rows = json.loads(first.read_text())
    by = {(r["profile"], r["variant"]): r for r in rows}
    assert set(by) == {(p, v) for p in ("none", "clip-like") for v in ("plain", "ours", "nncf")}
    assert by["clip-like", "plain"]["gate"] is False and by["clip-like", "ours"]["gate"] is True
    assert by["clip-like", "ours"]["int8_share"] >= 0.9 and by["clip-like", "ours"]["kept_float"] is not None
    for r in rows:  # batch 1 only: its columns, and none of batch 8's
        assert {"b1_ms", "speed_vs_fp32", "speed_vs_no_outliers", "latency_vs_nncf_b1"} <= set(r), r
        assert "b8_ms" not in r and "latency_vs_nncf_b8" not in r
    assert "| tiny | clip-like | ours | pass |" in out and "| speed vs FP32 |" in out

    again = tmp_path / "again.json"
    figures("--latency-only", str(first), "--profiles", "clip-like", "--batches", "1", "--latency-budget-s", "0.5",
            "--out", str(tmp_path / "models"), "--json", str(again), cwd=tmp_path)  # fmt: skip
    rows2 = json.loads(again.read_text())
    assert [(r["profile"], r["variant"]) for r in rows2] == [(r["profile"], r["variant"]) for r in rows]
    for r, r2 in zip(rows, rows2, strict=True):
        if r["profile"] == "none":  # not asked: exactly as the first run left it
            assert r2 == r
        else:  # timed again: the accuracy columns are the first run's, the latency columns are there
            assert r2["mean_cosine"] == r["mean_cosine"] and "b1_ms" in r2


def test_ours_alone_has_no_ratio_to_a_model_it_was_not_timed_beside(tmp_path: Path):
    """bigG's run: ours alone on one profile, no `none`: a speed against FP32 and nothing against NNCF or a
    no-outlier model (the old code divided by its own time and printed 1.00x)."""
    js = tmp_path / "alone.json"
    out = figures("--models", "tiny", "--profiles", "clip-like", "--variants", "--frames", "16", "--batches", "1",
                  "--latency-budget-s", "0.5", "--out", str(tmp_path / "models"), "--json", str(js),
                  cwd=tmp_path)  # fmt: skip
    (row,) = json.loads(js.read_text())
    assert row["variant"] == "ours" and row["gate"] is True and "speed_vs_fp32" in row
    assert not {"speed_vs_no_outliers", "latency_vs_nncf_b1"} & set(row)
    assert "| tiny | clip-like | ours | pass |" in out and "| — | — / — |" in out
