"""The optional VLM: visual features → projector → Llama decoder over a paged KV cache → answer.

Modules in data-flow order: `config` (model shapes), `tokenizer` (tokenizer.json + chat
template), `weights` (Hugging Face safetensors → namespaced, fused, validated parameters),
`gguf` (GGUF files: checked, dequantised, their tokenizer), `projector` (embedding → visual
prefix tokens), `kv_cache` (each sequence's block table and the paged K/V pool; `kv_blocks`: the block
allocator and the prefix index it shares blocks by), `decoder` (the Llama
forward pass on NumPy or CuPy), `llamacpp` (the same interface over llama.cpp, optional; `probe` runs it once in
a child process before it is trusted on a CPU kind), `sampling`, `pipeline`
(one question about one frame, prefix shared between questions), `trtllm` (TensorRT-LLM
checkpoint conversion, the thin adapter). Only NumPy (CuPy on a GPU) and `tokenizers` at runtime.
"""
