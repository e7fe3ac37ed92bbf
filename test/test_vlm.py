"""The VLM: paged KV cache invariants, the decoder against Hugging Face's Llama, weights, tokenizer,
projector, sampling, the pipeline's prefix sharing and admission, the TensorRT-LLM checkpoint format."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openclaw_vision.vlm.config import LLM_CONFIGS, hf_config_dict
from openclaw_vision.vlm.decoder import LlamaDecoder, PagedKVCache, dense_attention_reference
from openclaw_vision.vlm.kv_cache import BlockManager, OutOfBlocks
from openclaw_vision.vlm.pipeline import VlmPipeline, load_vlm
from openclaw_vision.vlm.projector import Projector, ProjectorConfig, projector_shapes
from openclaw_vision.vlm.sampling import Sampler, Sampling
from openclaw_vision.vlm.tokenizer import ChatTokenizer, TokenizerError, build_default_tokenizer
from openclaw_vision.vlm.weights import (
    ParameterError,
    llm_shapes,
    load_hf_llama,
    place,
    random_params,
    read_safetensors,
    validate,
    write_safetensors,
)

pytestmark = pytest.mark.vlm
TINY = LLM_CONFIGS["tiny"]


# --- paged KV cache: property tests -----------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("new"), st.lists(st.integers(0, 2), min_size=1, max_size=14)),
        st.tuples(st.just("fork"), st.integers(0, 10)),
        st.tuples(st.just("append"), st.integers(0, 10), st.integers(0, 2)),
        st.tuples(st.just("free"), st.integers(0, 10)),
    ),
    max_size=40,
)


def _snapshot(m: BlockManager):
    return (sorted(m.free_ids), sorted(m.used_ids), {k: list(s.table) for k, s in m.seqs.items()},
            [b.ref_count for b in m.blocks])  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(ops)
def test_block_manager_invariants_hold_under_any_operation_sequence(program):
    m = BlockManager(num_blocks=10, block_size=4)
    live: list[str] = []
    n = 0
    for op in program:
        before = _snapshot(m)
        try:
            if op[0] == "new":
                n += 1
                cached = m.allocate(f"s{n}", op[1])
                assert 0 <= cached < len(op[1]) and cached % 4 == 0
                live.append(f"s{n}")
            elif op[0] == "fork" and live:
                n += 1
                m.fork(live[op[1] % len(live)], f"s{n}")
                live.append(f"s{n}")
            elif op[0] == "append" and live:
                m.append(live[op[1] % len(live)], op[2])
            elif op[0] == "free" and live:
                m.free(live.pop(op[1] % len(live)))
        except OutOfBlocks:
            assert _snapshot(m) == before, "a rejected request changed the cache"
        m.check()
    for seq in live:
        m.free(seq)
    m.check()
    assert m.num_free == 10 and not m.used_ids and all(b.ref_count == 0 for b in m.blocks)


def test_shared_prefix_is_found_by_hash_and_copied_on_write():
    m = BlockManager(num_blocks=8, block_size=4)
    prefix = [7, 7, 7, 7, 8, 8, 8, 8, 9, 9]  # two full blocks + a partial one
    assert m.allocate("a", [*prefix, 1]) == 0
    assert m.allocate("b", [*prefix, 2]) == 8  # both full blocks found again: 8 positions not recomputed
    assert m.table("a")[:2] == m.table("b")[:2] and m.table("a")[2] != m.table("b")[2]
    m.free("a")
    m.free("b")
    assert m.allocate("c", [*prefix, 3]) == 8  # still found after their owners ended (until reused)
    m.fork("c", "d")
    shared = m.table("d")[2]
    m.append("d", 5)  # writes into the shared partial block: copied first
    assert m.table("d")[2] != shared and m.table("c")[2] == shared
    assert m.take_copies() == [(shared, m.table("d")[2])]
    m.check()


def test_out_of_blocks_rejects_new_request_and_leaves_running_ones_alone():
    m = BlockManager(num_blocks=3, block_size=4)
    m.allocate("running", list(range(8)))
    with pytest.raises(OutOfBlocks, match=r"needs 2 new KV blocks .* only 1 are free of 3"):
        m.allocate("new", list(range(100, 108)))
    assert m.table("running") == [0, 1] and "new" not in m.seqs
    m.append("running", 9)
    m.check()


# --- decoder -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_params():
    return place(random_params(TINY, seed=3))


def test_paged_attention_equals_dense_attention(tiny_params):
    dec = LlamaDecoder(TINY, tiny_params)
    cache = PagedKVCache(TINY, num_blocks=12, block_size=4)
    rng = np.random.default_rng(0)
    cache.manager.allocate("filler", list(range(9)))  # so the sequence's blocks are not 0, 1, 2 …
    length, start = 19, 13
    cache.manager.allocate("s", [("k", i) for i in range(length)])
    blocks, offsets = cache.manager.slots("s", 0, length)
    assert list(np.unique(blocks)) != list(range(len(np.unique(blocks))))
    k = rng.standard_normal((length, TINY.kv_heads, TINY.head_dim)).astype(np.float32)
    v = rng.standard_normal((length, TINY.kv_heads, TINY.head_dim)).astype(np.float32)
    q = rng.standard_normal((length - start, TINY.heads, TINY.head_dim)).astype(np.float32)
    cache.pool.write(0, blocks, offsets, k, v)
    gk, gv = cache.pool.gather(0, np.asarray(cache.manager.table("s")), length)
    got = dec.attention(q, gk, gv, start)
    want = dense_attention_reference(q, k, v, start, TINY.heads // TINY.kv_heads)
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.fixture(scope="module")
def hf_llama(tmp_path_factory):
    """A tiny LlamaForCausalLM written by Hugging Face transformers itself (config.json + safetensors)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = {k: v for k, v in hf_config_dict(TINY).items() if k not in ("architectures", "model_type")}
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).eval()
    with torch.no_grad():  # non-trivial norms, so a swapped norm weight would show
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    out = tmp_path_factory.mktemp("hf") / "tiny-llama"
    model.save_pretrained(out, safe_serialization=True)
    return model, out


def test_decoder_matches_transformers_llama_through_the_paged_cache(hf_llama):
    import torch

    model, folder = hf_llama
    cfg, params = load_hf_llama(folder)
    assert cfg == TINY
    dec = LlamaDecoder(cfg, place(params))
    ids = np.random.default_rng(1).integers(3, cfg.vocab_size, 29)
    with torch.no_grad():
        want = model(torch.tensor(ids)[None]).logits[0].numpy()
    cache = PagedKVCache(cfg, num_blocks=16, block_size=4)
    cache.manager.allocate("s", list(ids[:21]))
    got = dec.forward(cache, "s", dec.embed(ids[:21]), 0)  # prefill across 6 blocks
    np.testing.assert_allclose(got, want[20], atol=1e-4)
    for p in range(21, 29):  # decode one token at a time
        cache.manager.append("s", int(ids[p]))
        got = dec.forward(cache, "s", dec.embed(ids[p : p + 1]), p)
        np.testing.assert_allclose(got, want[p], atol=1e-4)


# --- weights -----------------------------------------------------------------------------------


def test_bf16_checkpoint_loads_bit_exactly(hf_llama, tmp_path):
    import torch

    model, _ = hf_llama
    folder = tmp_path / "bf16"
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    _, params = load_hf_llama(folder)
    want = model.model.layers[1].mlp.down_proj.weight.detach().to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(params["llm.layers.1.w_down"], want)
    q = model.model.layers[0].self_attn.q_proj.weight.detach().to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(params["llm.layers.0.wqkv"][: TINY.hidden], q)  # q rows first


def test_our_safetensors_files_read_back_with_the_safetensors_library(tmp_path):
    from safetensors.numpy import load_file

    tensors = {"a.weight": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, np.float16)}
    path = write_safetensors(tmp_path / "x.safetensors", tensors, {"format": "np"})
    back = load_file(str(path))
    assert set(back) == set(tensors)
    for k, v in tensors.items():
        np.testing.assert_array_equal(back[k], v)
        np.testing.assert_array_equal(read_safetensors(path)[k], v)


def test_validation_names_the_parameter_the_expectation_and_what_was_found():
    shapes = llm_shapes(TINY)
    good = place(random_params(TINY))
    validate(good, shapes)
    bad = dict(good)
    bad["llm.layers.1.wo"] = np.zeros((64, 63), np.float32)
    with pytest.raises(ParameterError, match=r"llm.layers.1.wo: expected shape \(64, 64\), found \(64, 63\)"):
        validate(bad, shapes)
    bad = dict(good, **{"llm.norm": np.ones(64, np.float16)})
    with pytest.raises(ParameterError, match=r"llm.norm: expected dtype float32, found float16"):
        validate(bad, shapes)
    bad = dict(good, **{"llm.norm": [1.0] * 64})
    with pytest.raises(ParameterError, match=r"llm.norm: expected a numpy array .device., found builtins.list"):
        validate(bad, shapes)
    bad = {k: v for k, v in good.items() if k != "llm.lm_head"}
    with pytest.raises(ParameterError, match=r"missing parameter llm.lm_head"):
        validate(bad, shapes)
    with pytest.raises(ParameterError, match=r"unexpected parameter projector.fc9.weight"):
        validate(dict(good, **{"projector.fc9.weight": np.zeros(1, np.float32)}), shapes)


def test_checkpoint_with_a_missing_tensor_is_refused(hf_llama, tmp_path):
    _, folder = hf_llama
    state = read_safetensors(folder / "model.safetensors")
    del state["model.layers.1.mlp.up_proj.weight"]
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(folder / "config.json", broken)
    write_safetensors(broken / "model.safetensors", state)
    with pytest.raises(ParameterError, match=r"no model.layers.1.mlp.up_proj.weight"):
        load_hf_llama(broken)


# --- tokenizer, projector, sampling ----------------------------------------------------------


def test_default_tokenizer_is_llama_shaped_and_round_trips(tmp_path):
    tok = ChatTokenizer(build_default_tokenizer(tmp_path, 512))
    assert (tok.tok.token_to_id("<unk>"), tok.bos_id, tok.eos_id) == (0, 1, 2)
    assert tok.tok.token_to_id("<0x41>") == 3 + 0x41 and tok.vocab_size == 512
    text = "Is the door open? Ünïcode 🙂 works via byte fallback."
    assert tok.decode(tok.encode(text)) == text
    parts = tok.chat("Is the door open?")
    assert parts.prefix[0] == tok.bos_id
    assert tok.tok.decode(parts.prefix, skip_special_tokens=False).startswith("<s> <|system|>\n")
    assert tok.tok.decode(parts.question, skip_special_tokens=False).endswith("</s> \n<|assistant|>\n")
    with pytest.raises(TokenizerError, match=r"no tokenizer.json"):
        ChatTokenizer(tmp_path / "nope")


def test_projector_maps_one_embedding_to_visual_tokens():
    cfg = ProjectorConfig(in_dim=32, hidden=64, tokens=5)
    rng = np.random.default_rng(0)
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in projector_shapes(cfg).items()}
    out = Projector(cfg, params)(rng.standard_normal(32))
    assert out.shape == (5, 64) and np.isfinite(out).all()
    with pytest.raises(ValueError, match=r"expects a 32-d embedding, got 31-d"):
        Projector(cfg, params)(np.zeros(31))


def test_sampling_greedy_and_nucleus():
    logits = np.array([0.0, 3.0, 2.9, -5.0])
    assert Sampler(Sampling())(logits) == 1
    nucleus = Sampler(Sampling(temperature=1.0, top_p=0.9, seed=1))
    picks = {nucleus(logits) for _ in range(300)}
    assert picks == {1, 2}  # the two tokens holding > 90 % of the mass; never 0 or 3
    assert {Sampler(Sampling(temperature=1.0, top_p=1e-6, seed=s))(logits) for s in range(20)} == {1}
    with pytest.raises(ValueError):
        Sampling(top_p=0)


# --- the pipeline ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    return load_vlm("tiny", embed_dim=32, visual_tokens=4, tokenizer_home=tmp_path_factory.mktemp("tok"))


def test_questions_about_one_frame_share_its_prefix_exactly(vlm):
    feats = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    shared = VlmPipeline(vlm, kv_blocks=64, block_size=4, max_new_tokens=6)
    a1 = shared.ask(feats, "frame-1", "Is the door open?")
    a2 = shared.ask(feats, "frame-1", "What is in front of the robot?")
    a3 = shared.ask(feats, "frame-1", "Is the door open?")
    assert not a1.prefix_reused and a2.prefix_reused and a3.prefix_reused
    assert a2.timings_ms["prefix"] == 0.0
    assert a1.tokens == a3.tokens  # the question sequences' writes never leaked into the shared prefix
    fresh = VlmPipeline(vlm, kv_blocks=64, block_size=4, max_new_tokens=6)
    assert fresh.ask(feats, "frame-1", "What is in front of the robot?").tokens == a2.tokens
    prefix_blocks = shared.manager.blocks_for(a1.prefix_tokens)
    assert len(shared.manager.used_ids) == prefix_blocks  # only the frame's prefix is still held
    other = shared.ask(np.ones(32, np.float32), "frame-2", "Is the door open?")
    assert other.tokens != a1.tokens or other.text != a1.text or not other.prefix_reused
    shared.manager.check()


def test_answers_stop_at_eos_or_max_tokens(vlm, monkeypatch):
    feats = np.zeros(32, np.float32)
    pipe = VlmPipeline(vlm, kv_blocks=64, max_new_tokens=5)
    ans = pipe.ask(feats, "f", "Describe the scene.")
    assert ans.stop == "max_tokens" and len(ans.tokens) == 5
    calls = {"n": 0}
    real = vlm.decoder.forward

    def eos_on_third(*args):
        logits = real(*args)
        calls["n"] += 1
        if calls["n"] == 3:
            logits = np.full_like(logits, -1e9)
            logits[vlm.tokenizer.eos_id] = 0
        return logits

    monkeypatch.setattr(vlm.decoder, "forward", eos_on_third)
    streamed = []
    ans = pipe.ask(feats, "f", "Describe the scene.", on_token=streamed.append)  # prefix cached: no prefix call
    assert ans.stop == "eos" and len(ans.tokens) == 2 and len(streamed) == 2  # EOS itself is not emitted


def test_a_request_that_cannot_fit_is_rejected_and_the_cache_stays_sound(vlm):
    feats = np.zeros(32, np.float32)
    pipe = VlmPipeline(vlm, kv_blocks=30, block_size=4, max_new_tokens=8)
    pipe.ask(feats, "f", "Is the door open?")
    pipe.max_new_tokens = 200
    with pytest.raises(OutOfBlocks, match=r"needs up to \d+ KV blocks \(\d+ positions\) but only \d+ of 30 are free"):
        pipe.ask(feats, "f", "Is the door open?")
    pipe.manager.check()
    pipe.max_new_tokens = 8
    assert pipe.ask(feats, "f", "Is the door open?").prefix_reused  # still serving, prefix intact
    with pytest.raises(ValueError, match=r"empty question"):
        pipe.ask(feats, "f", "  ")


# --- TensorRT-LLM checkpoint format ------------------------------------------------------------


def test_tensorrt_llm_checkpoint_has_its_names_shapes_and_config(hf_llama, tmp_path):
    from safetensors.numpy import load_file

    from openclaw_vision.vlm.trtllm import TrtLlmUnavailable, build_engine, write_checkpoint

    model, folder = hf_llama
    cfg, params = load_hf_llama(folder)
    out = write_checkpoint(cfg, params, tmp_path / "ckpt", dtype="float16")
    conf = json.loads((out / "config.json").read_text())
    assert conf["architecture"] == "LlamaForCausalLM" and conf["num_key_value_heads"] == 2
    assert conf["mapping"] == {"world_size": 1, "tp_size": 1, "pp_size": 1} and conf["dtype"] == "float16"
    w = load_file(str(out / "rank0.safetensors"))
    assert len(w) == 3 + 7 * cfg.layers and all(v.dtype == np.float16 for v in w.values())
    layer = model.model.layers[1]

    def hf(t):
        return t.detach().numpy().astype(np.float16)

    qkv = np.concatenate([hf(layer.self_attn.q_proj.weight), hf(layer.self_attn.k_proj.weight),
                          hf(layer.self_attn.v_proj.weight)])  # fmt: skip
    np.testing.assert_array_equal(w["transformer.layers.1.attention.qkv.weight"], qkv)
    np.testing.assert_array_equal(w["transformer.layers.1.mlp.fc.weight"], hf(layer.mlp.gate_proj.weight))
    np.testing.assert_array_equal(w["transformer.layers.1.mlp.gate.weight"], hf(layer.mlp.up_proj.weight))
    np.testing.assert_array_equal(w["transformer.layers.1.post_layernorm.weight"],
                                  hf(layer.post_attention_layernorm.weight))  # fmt: skip
    assert w["transformer.vocab_embedding.weight"].shape == (cfg.vocab_size, cfg.hidden)
    if shutil.which("trtllm-build"):
        pytest.skip("trtllm-build is installed: the unavailable path cannot be checked here")
    with pytest.raises(TrtLlmUnavailable, match=r"trtllm-build is not on PATH"):
        build_engine(out, tmp_path / "engine")


def test_ask_command_answers_about_a_bag_frame(tiny_model, sample_bag):
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "ask", "--bag", str(sample_bag), "--index", "3",
         "--model-path", str(tiny_model), "--llm", "tiny", "--max-new-tokens", "4", "--json", "Is the door open?"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert out["question"] == "Is the door open?" and out["frame_index"] == 3
    assert 1 <= out["answer_tokens"] <= 4 and out["llm"] == "tiny@random-seed0"
    assert out["encoder"].startswith("tiny@random-seed0") and out["stamp_ns"] > 0
    assert set(out["timings_ms"]) == {"encode", "prefix", "prefill", "decode"}
    bad = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "ask", "--bag", str(sample_bag), "--index", "99",
         "--model-path", str(tiny_model), "question"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2 and "has 12 frames; no frame 99" in bad.stderr


def test_bench_runs_transformers_on_our_very_weights(tiny_params):
    """The VLM benchmark's baseline sees the same weights (to_hf_llama) — so its ratios compare like with like."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from openclaw_vision.bench.vlm import transformers_model
    from openclaw_vision.vlm.weights import from_hf_llama, to_hf_llama

    hf_names = to_hf_llama(tiny_params, TINY)
    back = from_hf_llama(dict(hf_names), TINY)
    assert set(back) == set(tiny_params) and all(np.array_equal(back[k], tiny_params[k]) for k in back)
    model = transformers_model(TINY, hf_names)
    ids = np.random.default_rng(2).integers(3, TINY.vocab_size, 11)
    with torch.no_grad():
        want = model(torch.tensor(ids)[None]).logits[0, -1].numpy()
    dec = LlamaDecoder(TINY, tiny_params)
    cache = PagedKVCache(TINY, num_blocks=4, block_size=16)
    cache.manager.allocate("s", list(ids))
    np.testing.assert_allclose(dec.forward(cache, "s", dec.embed(ids), 0), want, atol=1e-4)
