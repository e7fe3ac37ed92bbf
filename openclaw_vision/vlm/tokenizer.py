"""Tokenizer from a local tokenizer.json (the `tokenizers` library) and TinyLlama's chat template.

TinyLlama-Chat formats a conversation as (Zephyr's template)

    <|system|>\\n{system}</s>\\n<|user|>\\n{message}</s>\\n<|assistant|>\\n

after a BOS. The VLM puts the visual prefix tokens at the start of the user turn, so the part
before the question — BOS, system turn, user header, image — is identical for every question
about one frame, and its KV blocks are shared (see kv_cache.py).

`build_default_tokenizer` writes a small Llama-style tokenizer.json (SentencePiece-BPE shape:
byte fallback, "▁" for spaces, <unk>/<s>/</s> at ids 0/1/2), trained on a short built-in
corpus, for the random-init default model and the tests. It says nothing true about language.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.errors import OpenclawError

SYSTEM_TURN = "<|system|>\n{system}</s>\n<|user|>\n"
QUESTION_TURN = "{question}</s>\n<|assistant|>\n"
DEFAULT_SYSTEM = "You are a robot's vision assistant. Answer briefly about the camera image."

_CORPUS = """
The robot looks at the scene in front of it. Is the door open or closed? The door is open.
There is a person near the table. A cup is on the table next to a laptop. The hallway is clear.
What is in front of the robot? A chair, a box and a wall. The light is on. The floor is wet.
Where is the red ball? The red ball is under the chair on the left side of the room.
How many people are in the image? Two people are standing by the window. The sky is blue.
Describe the scene. A kitchen with a white fridge, a sink and a window. A cat sits on the floor.
Can the robot pass? Yes, the path is free. No, a box blocks the way. Stop, there is a step ahead.
"""


class TokenizerError(OpenclawError, ValueError):
    """The tokenizer file is missing or unusable."""


@dataclass(frozen=True)
class PromptParts:
    prefix: list[int]  # BOS + system turn + user header (the visual tokens follow)
    question: list[int]  # the question and the assistant header


class ChatTokenizer:
    def __init__(self, path, origin: str | None = None) -> None:
        """`path`: a tokenizer.json (or its folder), or a `tokenizers.Tokenizer` built elsewhere (a GGUF's
        vocabulary, see gguf.py) with `origin` naming where it came from."""
        from tokenizers import Tokenizer

        if isinstance(path, Tokenizer):
            self.tok, file = path, origin or "tokenizer"
        else:
            path = Path(path)
            file = path / "tokenizer.json" if path.is_dir() else path
            if not file.is_file():
                raise TokenizerError(f"no tokenizer.json at {path}")
            self.tok = Tokenizer.from_file(str(file))
        ids = {name: self.tok.token_to_id(name) for name in ("<s>", "</s>")}
        if None in ids.values():
            raise TokenizerError(f"{file}: needs <s> and </s> tokens (a Llama tokenizer)")
        self.bos_id, self.eos_id = ids["<s>"], ids["</s>"]
        self.vocab_size = self.tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode([i for i in ids if i < self.vocab_size], skip_special_tokens=True)

    def chat(self, question: str, system: str = DEFAULT_SYSTEM) -> PromptParts:
        return PromptParts(
            prefix=[self.bos_id, *self.encode(SYSTEM_TURN.format(system=system))],
            question=self.encode(QUESTION_TURN.format(question=question)),
        )


def build_default_tokenizer(out: Path, vocab_size: int = 512) -> Path:
    """Write a Llama-shaped tokenizer.json of `vocab_size` tokens to `out` (a folder); returns the file."""
    from tokenizers import Tokenizer, decoders, normalizers, processors, trainers
    from tokenizers.models import BPE

    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    reserved = len(specials) + len(byte_tokens)
    if vocab_size <= reserved + 16:
        raise ValueError(f"vocab_size must exceed {reserved + 16}")
    normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # 1) learn merges on the corpus
    learner = Tokenizer(BPE(unk_token="<unk>", byte_fallback=True))
    learner.normalizer = normalizer
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - reserved, show_progress=False, special_tokens=[])
    learner.train_from_iterator(_CORPUS.strip().splitlines(), trainer)
    learned = learner.model.get_vocab() if hasattr(learner.model, "get_vocab") else learner.get_vocab()
    # 2) Llama's id layout: specials, 256 byte tokens, then the learned pieces
    vocab = {t: i for i, t in enumerate(specials + byte_tokens)}
    for token, _ in sorted(learned.items(), key=lambda kv: kv[1]):
        vocab.setdefault(token, len(vocab))
    import json

    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
              for m in json.loads(learner.to_str())["model"]["merges"]]  # fmt: skip
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizer
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens(specials)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    return out / "tokenizer.json"
