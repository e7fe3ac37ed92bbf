"""output_dim: a fitted projection in the exported graph, the same on the image and the text tower, and gated."""

from __future__ import annotations

import numpy as np
import pytest

from openclaw_vision.core.numerics import l2_normalise
from openclaw_vision.encoders import backends
from openclaw_vision.encoders.options import EncoderOptions
from openclaw_vision.models import onnx_files
from openclaw_vision.models.projection import ProjectionError, check_output_dim, projection_matrix
from openclaw_vision.preprocess.frame import Frame
from openclaw_vision.preprocess.sample_frames import pan_frames
from openclaw_vision.quant import projection
from openclaw_vision.text.encoder import TextEncoder

DIM = 16  # the tiny tower is 32-d


@pytest.fixture(scope="module")
def frames() -> list[Frame]:
    return [Frame.from_rgb(f) for f in pan_frames(32, 320, 240)]


@pytest.fixture(scope="module")
def projected(tiny_model, tiny_text_model, frames, tmp_path_factory):
    out = tmp_path_factory.mktemp("projected")
    image, text = out / "tiny-16.fp32.onnx", out / "tiny-16.text.fp32.onnx"
    result = projection.project_model(tiny_model, tiny_text_model, DIM, frames, image, text)
    return result, image, text


def _pixels(n: int = 5) -> np.ndarray:
    return np.random.default_rng(3).standard_normal((n, 3, 224, 224)).astype(np.float32)


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
def test_projection_is_in_the_graph_and_equals_numpy_projection_of_the_full_width(runtime, tiny_model, projected):
    row = backends.get(runtime)
    if not row.usable()[0]:
        pytest.skip(f"{runtime} not usable here")
    _, image, _ = projected
    matrix = projection_matrix(image)
    assert matrix.shape == (32, DIM)
    full = row.open(tiny_model, EncoderOptions(threads=1, gate="warn")).encode(_pixels()).vectors
    enc = row.open(image, EncoderOptions(threads=1, gate="warn"))
    got = enc.encode(_pixels()).vectors
    assert got.shape == (5, DIM) and enc.embed_dim == DIM
    np.testing.assert_allclose(got, l2_normalise(full @ matrix), atol=1e-5)
    ops = [n.op_type for n in onnx_files.load_graph(image).graph.node[-4:]]
    assert ops == ["MatMul", "ReduceL2", "Max", "Div"]


def test_text_tower_gets_the_same_projection_and_both_ids_carry_the_width(tiny_text_model, projected):
    result, image, text = projected
    np.testing.assert_array_equal(projection_matrix(text), projection_matrix(image))
    prompts = ["a photo of a door.", "a photo of a forklift."]
    full = TextEncoder(tiny_text_model, 1).encode(prompts).vectors
    enc = TextEncoder(text, 1)
    got = enc.encode(prompts)
    np.testing.assert_allclose(got.vectors, l2_normalise(full @ projection_matrix(text)), atol=1e-5)
    assert got.model_id == "tiny@random-seed0/16" == result.model_id
    assert onnx_files.read_metadata(image)["model_id"] == "tiny@random-seed0/16"
    assert projection.stored_result(image)["metrics"] == result.metrics


def test_gate_text_term_refuses_a_text_tower_of_another_projection(projected, tiny_text_model):
    from openclaw_vision.quant.crossmodal import load_reference
    from openclaw_vision.text.zero_shot import ModelMismatch

    _, _, text = projected
    assert load_reference(text, "tiny@random-seed0/16").model_id == "tiny@random-seed0/16"
    with pytest.raises(ModelMismatch):
        load_reference(tiny_text_model, "tiny@random-seed0/16")  # full-width labels for 16-d features
    with pytest.raises(ModelMismatch):
        load_reference(text, "tiny@random-seed0")


def test_fit_keeps_the_geometry_and_the_figures_are_recorded(projected):
    result, _, _ = projected
    assert result.passed and result.output_dim == DIM and result.full_dim == 32
    assert result.metrics["retained_variance"] >= 0.9 and set(result.alternatives) == {"image-only", "text-only"}
    assert result.heldout_frames == 8 and result.fit_frames == 24 and result.labels == 30


def test_a_projection_fitted_on_garbage_fails_the_gate_with_its_figures(
    tiny_model, tiny_text_model, frames, tmp_path, monkeypatch
):
    def garbage(image, text, dim):  # orthonormal columns that ignore the data
        q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((image.shape[1], dim)))
        return q.astype(np.float32)

    monkeypatch.setattr(projection, "fit", garbage)
    out = tmp_path / "bad.onnx"
    with pytest.raises(projection.ProjectionGateFailed, match=r"retained variance \d+\.\d+% \(>= 90%\)"):
        projection.project_model(tiny_model, tiny_text_model, 2, frames, out, tmp_path / "bad.text.onnx")
    assert not out.exists()


def test_a_too_narrow_projection_fails_the_build_with_its_figures_and_writes_nothing(
    tiny_model, tiny_text_model, frames, tmp_path
):
    out = tmp_path / "tiny-2.onnx"
    with pytest.raises(projection.ProjectionGateFailed, match=r"32->2 projection .* retained variance \d+\.\d+%"):
        projection.project_model(tiny_model, tiny_text_model, 2, frames, out, tmp_path / "tiny-2.text.onnx")
    assert list(tmp_path.iterdir()) == []


def test_output_dim_rules():
    assert check_output_dim(0, 512) == 0  # the tower's width
    assert check_output_dim(512, 512) == 0  # ViT-B-32 at 512: nothing to project, the same model
    assert check_output_dim(512, 1280) == 512
    with pytest.raises(ProjectionError, match="above ViT-B-32's embedding width 512"):
        check_output_dim(1024, 512, "ViT-B-32")
    with pytest.raises(ProjectionError):
        check_output_dim(-1, 512)


@pytest.fixture()
def home_with_tiny(home_with_text_tower, tiny_model):
    """A data home of this test's own holding the session's tiny image and text exports (no re-export)."""
    import shutil

    from openclaw_vision.core.resources import default_model_path

    shutil.copy(tiny_model, default_model_path("tiny"))
    return home_with_text_tower


def test_export_cli_builds_both_projected_towers_and_refuses_a_width_above_the_towers(home_with_tiny, capsys):
    from openclaw_vision.cli import main
    from openclaw_vision.core.resources import default_model_path
    from openclaw_vision.text.build import default_text_model_path

    assert main(["export", "--model", "tiny", "--output-dim", "64"]) == 1
    assert "above tiny's embedding width 32" in capsys.readouterr().err
    assert main(["export", "--model", "tiny", "--output-dim", "2"]) == 1
    assert "failed its gate" in capsys.readouterr().err and not default_model_path("tiny-2").exists()
    assert main(["export", "--model", "tiny", "--output-dim", "16"]) == 0
    out = capsys.readouterr().out
    assert "32 -> 16-d" in out and "retained variance" in out and "held-out frames" in out
    image, text = default_model_path("tiny-16"), default_text_model_path("tiny-16")
    assert onnx_files.read_metadata(image)["model_id"] == onnx_files.read_metadata(text)["model_id"]
    assert onnx_files.read_metadata(text)["model_id"] == "tiny@random-seed0/16"


def test_output_dim_of_the_towers_width_is_the_full_width_model(home_with_tiny):
    from openclaw_vision.build_tools.first_use import ensure_fp32
    from openclaw_vision.models.naming import projected_name

    assert projected_name("ViT-B-32", 512) == projected_name("ViT-B-32", 0) == "ViT-B-32"
    assert projected_name("ViT-bigG-14", 512) == "ViT-bigG-14-512"
    assert ensure_fp32("tiny", output_dim=32) == ensure_fp32("tiny")
    assert onnx_files.read_metadata(ensure_fp32("tiny"))["model_id"] == "tiny@random-seed0"


def test_first_use_int8_build_quantises_the_projection_with_the_text_term_of_the_same_projection(home_with_tiny):
    from openclaw_vision.build_tools.first_use import ensure_int8
    from openclaw_vision.core.gate import verdicts

    path = ensure_int8("tiny", output_dim=16)
    meta = onnx_files.read_metadata(path)
    assert path.name == "tiny-16.int8.onnx" and meta["model_id"] == "tiny@random-seed0/16"
    onnxruntime = verdicts(meta)["onnxruntime"]
    assert onnxruntime.passed and "zero_shot_top1" in onnxruntime.values  # labels through the 16-d text tower


def test_node_configs_take_output_dim_and_refuse_one_above_the_width():
    from openclaw_vision.runtime.config import ConfigError, EncoderConfig, VlmConfig

    assert VlmConfig(model="ViT-bigG-14", output_dim=512).validate().embed_dim == 512
    assert VlmConfig(model="ViT-B-32", output_dim=512).validate().embed_dim == 512
    with pytest.raises(ConfigError, match="output_dim=1024: output_dim 1024 is above ViT-B-32's"):
        EncoderConfig(model="ViT-B-32", output_dim=1024).validate()


def test_shipped_vit_g_512_config_is_the_briefs_node():
    from pathlib import Path

    from openclaw_vision.models.naming import projected_name
    from openclaw_vision.runtime.config import from_sources

    root = Path(__file__).resolve().parents[1]
    cfg = from_sources(root / "config" / "encoder-vit-g-512.yaml", "encoder_node", {})
    assert (cfg.model, cfg.output_dim, cfg.precision) == ("ViT-bigG-14", 512, "int8")
    assert projected_name(cfg.model, cfg.output_dim) == "ViT-bigG-14-512"  # the node loads ViT-bigG-14-512.int8.onnx


def test_launch_output_dim_reaches_the_encoder_vlm_and_labels_nodes():
    from openclaw_vision.ros.launch_args import node_overrides

    encoder, vlm, labels = node_overrides({"model": "ViT-bigG-14", "output_dim": "512"})
    assert encoder == vlm == labels == {"model": "ViT-bigG-14", "output_dim": 512}
    assert node_overrides({"model": "ViT-B-32"})[0] == {"model": "ViT-B-32"}  # unset: the file decides
