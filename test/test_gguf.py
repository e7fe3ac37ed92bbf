"""GGUF files (written here, tiny shape, each type) in our decoder (dequantised) and in llama.cpp.

Tests that need llama.cpp skip with one line where llama-cpp-python is absent; `make test`
installs it (the `llamacpp` extra), so CI runs them. They run it in this process only after its
probe passed (vlm/probe.py: a child process decodes first, since a crash there would end pytest);
a failed probe fails `test_the_installed_llamacpp_passes_its_probe` and skips the others with it.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from openclaw_vision.vlm import llamacpp
from openclaw_vision.vlm.config import LlamaConfig
from openclaw_vision.vlm.gguf import GgufError, gguf_params, gguf_tokenizer, read_gguf, write_gguf
from openclaw_vision.vlm.weights import random_params

pytestmark = pytest.mark.vlm


def _usable() -> bool:
    """llama.cpp is installed and passed its probe on this CPU (recorded in the session's data home)."""
    from openclaw_vision.vlm.probe import verdict

    return llamacpp.available() and verdict().ok


@pytest.fixture()
def probed_llamacpp() -> None:
    from openclaw_vision.vlm.probe import verdict

    v = verdict()
    if not v.ok:
        pytest.skip(v.reason)


def needs_llamacpp(test):
    """Skip where llama-cpp-python is absent; where its probe failed, skip with the probe's reason."""
    return pytest.mark.skipif(not llamacpp.available(), reason=llamacpp.INSTALL_HINT)(
        pytest.mark.usefixtures("probed_llamacpp")(test)
    )


# Row lengths divisible by 256 (the K-quants' block), GQA 4:2 as TinyLlama's 32:4 in spirit.
CFG = LlamaConfig(vocab_size=512, hidden=256, intermediate=512, layers=2, heads=4, kv_heads=2, max_positions=256)
EMBED_DIM, VISUAL = 32, 4  # 32: the tiny encoder's width (the node takes it from --model tiny)


def _params(seed: int = 0) -> dict:
    """Random weights with logits that spread (std 0.06 → logit std ~1): ties would make top-1 meaningless."""
    p = random_params(CFG, seed, std=0.06)
    rng = np.random.default_rng(seed + 7)
    for name in p:
        if name.endswith("norm"):
            p[name] = (1 + 0.1 * rng.standard_normal(p[name].shape)).astype(np.float32)  # not all ones
    return p


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The same weights as F32, F16, Q8_0 and Q4_0 GGUF (and Q4_K_M by llama.cpp's quantiser, where present)."""
    from openclaw_vision.vlm.tokenizer import build_default_tokenizer

    d = tmp_path_factory.mktemp("gguf")
    tok = build_default_tokenizer(d / "tok", CFG.vocab_size)
    params = _params()
    out = {q: write_gguf(d / f"tiny-{q}.gguf", CFG, params, tok, q) for q in ("F32", "F16", "Q8_0", "Q4_0")}
    if _usable():
        out["Q4_K_M"] = llamacpp.quantize_gguf(out["F32"], d / "tiny-Q4_K_M.gguf", "Q4_K_M")
    return {"paths": out, "params": params, "tokenizer": tok, "dir": d}


def _ours(path):
    from openclaw_vision.vlm.decoder import LlamaDecoder

    gg = read_gguf(path)
    return LlamaDecoder(gg.cfg, gguf_params(gg))


def _prompt(seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    ids = [1, *rng.integers(3, CFG.vocab_size, 12).tolist()]
    visual = rng.standard_normal((VISUAL, CFG.hidden)).astype(np.float32) * 0.5
    return [ids, visual, rng.integers(3, CFG.vocab_size, 6).tolist()]


def _logits(dec, parts, seq: str = "s") -> np.ndarray:
    cache = dec.new_cache(32, 16)
    n = sum(len(p) for p in parts)
    cache.manager.allocate(seq, [("k", i) for i in range(n)])
    try:
        return np.asarray(dec.run(cache, seq, parts, 0), np.float64)
    finally:
        cache.manager.free(seq)


def _kl(p_logits: np.ndarray, q_logits: np.ndarray) -> float:
    """KL(p || q) of the softmax distributions, nats (the package's one definition)."""
    from openclaw_vision.core.numerics import kl_from_logits

    return float(kl_from_logits(p_logits, q_logits))


def test_reading_checks_the_file_and_dequantises_to_the_weights_written(files):
    params = files["params"]
    gg = read_gguf(files["paths"]["F32"])
    assert gg.cfg == CFG and gg.file_type == "F32"
    back = gguf_params(gg)
    assert set(back) == set(params)
    for name, value in params.items():  # F32: bit-exact round trip, Q/K row permutation undone
        np.testing.assert_array_equal(back[name], value, err_msg=name)
    # quantised files: each matrix within its format's step (Q8_0: 1/127 of a block's max |w|; Q4_0: 1/7)
    for q, step in (("Q8_0", 1 / 127), ("Q4_0", 1 / 7)):
        g = read_gguf(files["paths"][q])
        assert g.file_type == q
        w, ref = gguf_params(g)["llm.layers.0.w_down"], params["llm.layers.0.w_down"]
        assert np.abs(w - ref).max() <= step * np.abs(ref).max() * 1.01
    # the model id is the content's: same bytes under another name → same digest
    copy = files["dir"] / "renamed.gguf"
    copy.write_bytes(files["paths"]["F32"].read_bytes())
    assert read_gguf(copy).model_id.split("@")[1] == gg.model_id.split("@")[1]
    assert read_gguf(files["paths"]["Q8_0"]).model_id.split("@")[1] != gg.model_id.split("@")[1]


def test_the_tokenizer_comes_from_the_files_vocabulary(files):
    from tokenizers import Tokenizer

    original = Tokenizer.from_file(str(files["tokenizer"]))
    rebuilt = gguf_tokenizer(read_gguf(files["paths"]["Q4_0"]))
    for text in ("Is the door open?", "The red ball is under the chair on the left.", "Zebra 42 ünïcode"):
        ids = rebuilt.encode(text, add_special_tokens=False).ids
        assert ids == original.encode(text, add_special_tokens=False).ids, text
        assert rebuilt.decode(ids) == text
    assert rebuilt.token_to_id("<s>") == 1 and rebuilt.token_to_id("</s>") == 2


def test_a_truncated_foreign_or_unsupported_file_is_a_clear_error(files, tmp_path):
    from openclaw_vision.vlm.pipeline import load_vlm

    good = files["paths"]["Q8_0"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good[: len(good) * 2 // 3])
    with pytest.raises(GgufError, match="truncated"):
        load_vlm(str(cut), EMBED_DIM, VISUAL, llm_backend="ours")
    foreign = tmp_path / "model.gguf"
    foreign.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(64))  # a safetensors header
    with pytest.raises(GgufError, match="not a GGUF file"):
        load_vlm(str(foreign), EMBED_DIM, VISUAL, llm_backend="ours")
    header_cut = tmp_path / "header.gguf"
    header_cut.write_bytes(good[:40])
    with pytest.raises(GgufError, match="truncated or corrupt"):
        read_gguf(header_cut)
    wrong = dict(files["params"], **{"llm.layers.1.w_down": np.zeros((CFG.hidden, 256), np.float32)})
    bad_shape = write_gguf(tmp_path / "shape.gguf", CFG, wrong, files["tokenizer"], "F32")
    with pytest.raises(GgufError, match=r"blk\.1\.ffn_down\.weight: expected shape \(256, 512\), found \(256, 256\)"):
        read_gguf(bad_shape)
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "phi.gguf"), "phi2")
    w.add_tensor("token_embd.weight", np.zeros((8, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GgufError, match="architecture 'phi2' is not supported"):
        read_gguf(tmp_path / "phi.gguf")


def test_the_backend_choice(files, tmp_path):
    from openclaw_vision.vlm.pipeline import pick_llm_backend

    f32 = str(files["paths"]["F32"])
    assert pick_llm_backend("tiny", "auto")[0] == "ours"
    assert pick_llm_backend(f32, "ours")[0] == "ours"
    assert pick_llm_backend(f32, "auto")[0] == ("llamacpp" if _usable() else "ours")
    with pytest.raises(ValueError, match="runs GGUF files"):
        pick_llm_backend("tiny", "llamacpp")


@pytest.mark.skipif(not llamacpp.available(), reason=llamacpp.INSTALL_HINT)
def test_the_installed_llamacpp_passes_its_probe(data_home):
    """The wheel `make test` built (no AMX kernels) runs here: its probe passes, once per data home."""
    from openclaw_vision.vlm.probe import verdict

    first = verdict()
    assert first.ok and first.probed, first.reason
    again = verdict()
    assert again.ok and not again.probed and again.key == first.key


# llama.cpp's ISA classes, lowest first: (this CPU's /proc/cpuinfo flag, llama.cpp's system-info name). Its kernels
# are fixed when it is compiled (-march=native): no run-time switch holds it to a lower class, as ONEDNN_MAX_CPU_ISA
# does for OpenVINO. So the tests above run at the highest class this CPU has, and the others are skips saying why.
LLAMACPP_ISAS = {"AVX2": ("avx2", "AVX2"), "AVX512_VNNI": ("avx512_vnni", "AVX512_VNNI")}


@needs_llamacpp
@pytest.mark.parametrize("isa", [*LLAMACPP_ISAS, "AMX"])
def test_llamacpp_is_compiled_for_this_cpus_isa_without_amx(isa):
    """The installed build runs this CPU's highest vector class (AVX2 or AVX-512 VNNI) and never AMX on any
    CPU (`make llamacpp`'s -mno-amx-*: ggml's AMX path dies with SIGILL on AMX Xeons)."""
    from openclaw_vision.core import cpu

    system_info = llamacpp._lib().llama_print_system_info().decode()
    if isa == "AMX":
        assert "AMX_INT8 = 1" not in system_info, f"built with ggml's AMX kernels: {system_info}"
        return
    flags = cpu.flags()
    have = [c for c, (flag, _) in LLAMACPP_ISAS.items() if flag in flags]
    if isa not in have:
        pytest.skip(f"this CPU has no {isa}")
    if isa != have[-1]:
        pytest.skip(f"{isa} not forced: llama.cpp's kernels are fixed at compile time (-march=native), "
                    f"it runs this CPU's {have[-1]}")  # fmt: skip
    assert f"{LLAMACPP_ISAS[isa][1]} = 1" in system_info, system_info


@needs_llamacpp
@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0", "Q4_0", "Q4_K_M"])
def test_llamacpp_and_ours_agree_on_the_same_file(files, qtype):
    """Next-token logits for 6 prompts (tokens, visual embeddings, tokens), both backends, one file.

    Bounds, from this shape's measurements here (AVX-512) with margin for other kernels (AVX2):
    F32 max |Δ| measured 4.8e-6 (float32 summation order) → bound 1e-4. Quantised and F16 files:
    llama.cpp also rounds the activations (to Q8 / F16) in its dot products while ours multiplies
    float32 activations by the dequantised weights: KL measured ≤ 9e-4 (Q4_K_M; Q8_0 3e-4, F16
    3e-7) → bound 5e-3, and the same top-1 on at least 5 of 6 prompts (6 of 6 measured).
    """
    path = files["paths"][qtype]
    ours, theirs = _ours(path), llamacpp.LlamaCppDecoder(path, n_ctx=512)
    pairs = [(_logits(ours, _prompt(s)), _logits(theirs, _prompt(s))) for s in range(6)]
    assert all(b.shape == (CFG.vocab_size,) and np.isfinite(b).all() for _, b in pairs)
    if qtype == "F32":
        assert max(np.abs(a - b).max() for a, b in pairs) <= 1e-4
    else:
        assert max(_kl(a, b) for a, b in pairs) <= 5e-3
    assert sum(int(np.argmax(a) == np.argmax(b)) for a, b in pairs) >= 5


@needs_llamacpp
def test_quantised_files_stay_close_to_the_float32_logits(files):
    """llama.cpp on Q8_0 / Q4_0 against our decoder on the original float32 weights, over 48 prompts.

    Random weights give flat logits (std ~0.9 over 512 tokens), so near-ties are common and
    rounding flips some top-1s; chance agreement would be 1/512 (0.1 of 48 prompts). Measured
    here: Q8_0 KL ≤ 9.8e-4 nats, top-1 46/48; Q4_0 KL ≤ 0.124 (≈ ½·Var(Δlogit) for the ~9 %
    relative rounding noise of 4-bit blocks), top-1 20/48. Bounds (~3× on KL, a few standard
    deviations of a binomial on top-1): Q8_0 KL ≤ 5e-3, top-1 ≥ 42/48; Q4_0 KL ≤ 0.4, top-1 ≥ 12/48.
    """
    from openclaw_vision.vlm.decoder import LlamaDecoder

    ref_dec = LlamaDecoder(CFG, files["params"])
    refs = [_logits(ref_dec, _prompt(s)) for s in range(48)]
    for qtype, kl_bound, top1_min in (("Q8_0", 5e-3, 42), ("Q4_0", 0.4, 12)):
        dec = llamacpp.LlamaCppDecoder(files["paths"][qtype], n_ctx=512)
        got = [_logits(dec, _prompt(s)) for s in range(48)]
        kls = [_kl(r, g) for r, g in zip(refs, got, strict=True)]
        top1 = sum(int(np.argmax(r) == np.argmax(g)) for r, g in zip(refs, got, strict=True))
        assert max(kls) <= kl_bound, (qtype, kls)
        assert top1 >= top1_min, (qtype, top1)
        dec.close()


@needs_llamacpp
def test_visual_embeddings_change_the_logits_and_prefix_reuse_equals_fresh_evaluation(files):
    dec = llamacpp.LlamaCppDecoder(files["paths"]["F32"], n_ctx=512)
    ids, visual, question = _prompt()
    other = np.random.default_rng(9).standard_normal(visual.shape).astype(np.float32) * 0.5
    a, b = _logits(dec, [ids, visual, question]), _logits(dec, [ids, other, question])
    assert np.abs(a - b).max() > 0.05  # another frame, another distribution
    ours = _ours(files["paths"]["F32"])
    assert np.abs(_logits(ours, [ids, other, question]) - b).max() <= 1e-3  # and the right one
    # prefix once, then two questions forked from it (llama.cpp's sequence copy) == fresh
    cache = dec.new_cache(32, 16)
    m = cache.manager
    n = len(ids) + len(visual)
    m.allocate("prefix", [("p", i) for i in range(n)])
    dec.run(cache, "prefix", [ids, visual], 0)
    second = [5, 6, 7, 8]
    for k, q in enumerate((question, second)):
        m.fork("prefix", f"q{k}")
        for t in q:
            m.append(f"q{k}", t)
        reused = np.asarray(dec.run(cache, f"q{k}", [q], n), np.float64)
        m.free(f"q{k}")
        fresh = _logits(dec, [ids, visual, q], seq="fresh")
        np.testing.assert_allclose(reused, fresh, atol=1e-4)
    m.free("prefix")
    m.check()
    assert sorted(dec._free_seqs) == list(range(8))  # every llama.cpp sequence given back


@needs_llamacpp
def test_the_pipeline_answers_the_same_with_both_backends(files):
    """Greedy answers about two frames, three questions, F32 file: same tokens from ours and llama.cpp."""
    from openclaw_vision.vlm.pipeline import VlmPipeline, load_vlm

    feats = [np.random.default_rng(s).standard_normal(EMBED_DIM).astype(np.float32) for s in (0, 1)]
    answers = {}
    for backend in ("ours", "llamacpp"):
        model = load_vlm(str(files["paths"]["F32"]), EMBED_DIM, VISUAL, llm_backend=backend, n_ctx=1024)
        assert model.backend == backend and model.model_id.startswith("tiny-F32@")
        pipe = VlmPipeline(model, kv_blocks=64, max_new_tokens=8)
        got = [pipe.ask(feats[0], "f0", "Is the door open?"), pipe.ask(feats[0], "f0", "What is on the table?"),
               pipe.ask(feats[1], "f1", "Is the door open?")]  # fmt: skip
        assert [a.prefix_reused for a in got] == [False, True, False]
        answers[backend] = [a.tokens for a in got]
        pipe.manager.check()
    assert answers["ours"] == answers["llamacpp"]
    assert answers["llamacpp"][0] != answers["llamacpp"][2] or answers["llamacpp"][0] == []


@needs_llamacpp
@pytest.mark.dds
def test_the_vlm_node_answers_over_dds_with_llamacpp(files, dds_domain, tmp_path):
    from dds_helpers import Inbox, status_reached, wait_until

    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.process import NodeProcess
    from openclaw_vision.ros.types import DEFAULT, DIAGNOSTIC_ARRAY, HEADER, STRING, TIME, VISUAL_FEATURES
    from openclaw_vision.ros.vlm_status import STATUS_NAME

    path = files["paths"]["Q8_0"]
    stats = tmp_path / "stats.json"
    node = NodeProcess(
        ["--llm", str(path), "--llm-backend", "llamacpp", "--model", "tiny", "--visual-tokens",
         str(VISUAL), "--max-new-tokens", "5", "--kv-blocks", "32", "--transport", "cyclonedds",
         "--stats-json", str(stats)],
        log_path=tmp_path / "vlm.log", node="vlm",
    )  # fmt: skip
    t = CycloneTransport("test_gguf_node")
    try:
        feats_pub = t.publisher("/visual_features", VISUAL_FEATURES, DEFAULT)
        prompt_pub = t.publisher("/vlm/prompt", STRING, DEFAULT)
        answers, diags = Inbox(), Inbox()
        sub = t.subscribe("/vlm/answer", "openclaw_vision/msg/VlmAnswer", DEFAULT, answers)
        t.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, DEFAULT, diags)
        wait_until(lambda: all(e.matched() for e in (feats_pub, prompt_pub, sub)) or not node.alive(), 60)
        assert node.alive(), node.log_text()
        # the node's side: its features and prompt subscriptions have matched our writers
        diags.wait_for(status_reached(STATUS_NAME, "publishers", 2), 60, "the node's side")
        header = t.msg(HEADER)(stamp=t.msg(TIME)(sec=7, nanosec=9), frame_id="cam")
        vec = np.random.default_rng(0).standard_normal(EMBED_DIM).astype(np.float32)
        feats_pub.publish(t.msg(VISUAL_FEATURES)(header=header, model_id="enc@test", dim=EMBED_DIM,
                                                 embedding=t.float_array(vec)))  # fmt: skip
        deadline = time.monotonic() + 30
        while not answers.items and time.monotonic() < deadline:  # until the features have arrived
            prompt_pub.publish(t.msg(STRING)(data="Is the door open?"))
            time.sleep(0.5)
        first = answers.wait(1)[0]
        assert (first.header.stamp.sec, first.header.stamp.nanosec, first.header.frame_id) == (7, 9, "cam")
        assert first.model_id == read_gguf(path).model_id and 1 <= first.answer_tokens <= 5
    finally:
        rc = node.stop()
        t.close()
    assert rc == 0, node.log_text()
    assert json.loads(stats.read_text())["llm_backend"] == "llamacpp"
    assert "llm backend llamacpp (asked for, Q8_0" in node.log_text()


@pytest.mark.dds
def test_the_vlm_node_refuses_a_truncated_gguf_at_start(files, tmp_path):
    from openclaw_vision.ros.process import NodeProcess

    good = files["paths"]["Q4_0"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good[: len(good) // 2])
    node = NodeProcess(["--llm", str(cut), "--transport", "cyclonedds"], log_path=tmp_path / "l.log", node="vlm")
    assert node.proc.wait(60) == 2
    node.stop()
    assert f"cannot load the VLM: {cut}: unreadable GGUF (truncated or corrupt" in node.log_text()
