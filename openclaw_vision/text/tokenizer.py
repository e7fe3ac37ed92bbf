"""CLIP's tokenizer: text cleaning, byte-level BPE over open_clip's merges file, 77-token rows.

What CLIP's text tower was trained on, step by step:

1. Clean: `ftfy.fix_text` (mojibake, odd Unicode forms), HTML entities unescaped twice
   (`&amp;amp;` → `&`), runs of whitespace → one space, ends trimmed, then lower case.
2. Split into pre-tokens with one regular expression: the two special tokens written out, the
   English contractions ('s 't 're 've 'm 'll 'd), runs of letters, single digits, and runs of
   anything that is neither space, letter nor digit. Whitespace separates and is dropped.
3. Each pre-token's UTF-8 bytes become printable characters (bytes that are printable Latin-1
   stand for themselves, the other 68 get the code points 256…), and the last one gets `</w>`.
4. Byte-pair merges, lowest rank first, until no ranked pair is left; each piece is a token id.
5. Rows: start-of-text, the ids, end-of-text; cut to 77 (the end token kept as the last one)
   and padded with 0.

The vocabulary (49 408 ids): 256 byte characters, the same with `</w>`, the first 48 894 merges
in file order, then `<start_of_text>` and `<end_of_text>`. The merges file comes from
`merges.py`. Needs `ftfy` and `regex` (`\\p{L}`, `\\p{N}`), no torch.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .merges import TokenizerError, find_bpe, read_merges_text

CONTEXT_LENGTH = 77
SOT, EOT = "<start_of_text>", "<end_of_text>"
#: Merges CLIP uses: its vocabulary is 49 408 = 2·256 byte tokens + these + 2 special tokens.
N_MERGES = 49408 - 2 * 256 - 2
_CACHE_LIMIT = 100_000


def byte_symbols() -> list[str]:
    """One printable character per byte value, in vocabulary order (not byte order).

    Bytes '!'…'~', '¡'…'¬' and '®'…'ÿ' stand for themselves and come first; the remaining 68
    (controls, space, soft hyphen, …) follow in byte order as chr(256), chr(257), …
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    rest = [b for b in range(256) if b not in set(keep)]
    return [chr(b) for b in keep] + [chr(256 + i) for i in range(len(rest))]


def byte_table() -> dict[int, str]:
    """byte value → its printable character (see `byte_symbols`)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    order = keep + [b for b in range(256) if b not in set(keep)]
    return dict(zip(order, byte_symbols(), strict=True))


def _imports():
    try:
        import ftfy
        import regex
    except ImportError as err:
        raise TokenizerError(
            f"CLIP's tokenizer needs the `{err.name}` package: pip install ftfy regex "
            "(or install openclaw_vision with the `text` extra)"
        ) from None
    return ftfy, regex


class ClipTokenizer:
    """Text → CLIP token ids, equal to open_clip's SimpleTokenizer (tested on thousands of strings)."""

    def __init__(self, bpe_path: str | Path | None = None, context_length: int = CONTEXT_LENGTH) -> None:
        ftfy, regex = _imports()
        self._fix_text = ftfy.fix_text
        self.bpe_path = find_bpe(bpe_path)
        lines = read_merges_text(self.bpe_path).split("\n")
        merges = [tuple(line.split()) for line in lines[1 : N_MERGES + 1]]  # line 0 is the version header
        if len(merges) != N_MERGES or any(len(m) != 2 for m in merges):
            raise TokenizerError(f"{self.bpe_path}: expected {N_MERGES} merges of two symbols")
        symbols = byte_symbols()
        vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges] + [SOT, EOT]
        self.encoder = {token: i for i, token in enumerate(vocab)}
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.bytes = byte_table()
        self.sot_id, self.eot_id = self.encoder[SOT], self.encoder[EOT]
        self.vocab_size = len(vocab)
        self.context_length = context_length
        letters, digits = r"\p{L}", r"\p{N}"
        self._pattern = regex.compile(
            rf"{SOT}|{EOT}|'s|'t|'re|'ve|'m|'ll|'d|[{letters}]+|[{digits}]|[^\s{letters}{digits}]+", regex.IGNORECASE
        )
        self._cache: dict[str, tuple[int, ...]] = {}

    def clean(self, text: str) -> str:
        """ftfy, HTML entities (twice: texts scraped from the web are often escaped twice), whitespace, lower case."""
        text = html.unescape(html.unescape(self._fix_text(text)))
        return " ".join(text.split()).lower()

    def _merge(self, symbols: list[str]) -> list[str]:
        """Apply the ranked merges to one pre-token's symbols until no adjacent pair has a rank."""
        while len(symbols) > 1:
            pair = min(itertools.pairwise(symbols), key=lambda p: self.ranks.get(p, N_MERGES))
            if pair not in self.ranks:
                break
            first, second = pair
            merged, i = [], 0
            while i < len(symbols):  # every non-overlapping occurrence, left to right
                if i + 1 < len(symbols) and symbols[i] == first and symbols[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        return symbols

    def _token_ids(self, piece: str) -> tuple[int, ...]:
        if piece in (SOT, EOT):
            return (self.encoder[piece],)
        cached = self._cache.get(piece)
        if cached is None:
            chars = [self.bytes[b] for b in piece.encode("utf-8")]
            chars[-1] += "</w>"
            cached = tuple(self.encoder[s] for s in self._merge(chars))
            if len(self._cache) < _CACHE_LIMIT:
                self._cache[piece] = cached
        return cached

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (cleaned), without start/end tokens."""
        ids: list[int] = []
        for piece in self._pattern.findall(self.clean(text)):
            ids.extend(self._token_ids(piece))
        return ids

    def __call__(self, texts: str | Sequence[str]) -> np.ndarray:
        """(N, context_length) int64 rows: start, ids, end; cut to length keeping the end token; 0-padded."""
        if isinstance(texts, str):
            texts = [texts]
        out = np.zeros((len(texts), self.context_length), np.int64)
        for row, text in zip(out, texts, strict=True):
            ids = [*[self.sot_id, *self.encode(text)][: self.context_length - 1], self.eot_id]
            row[: len(ids)] = ids
        return out
