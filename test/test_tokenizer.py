"""CLIP's tokenizer: equal to open_clip's SimpleTokenizer, and its merges file found, fetched and checked.

The reference is open_clip's own `tokenizer.py`, loaded as a module of its own: importing the
`open_clip` package would import torchvision, which does not fit beside this torch build. The
Makefile installs open_clip_torch (pinned, --no-deps) for exactly this.
"""

from __future__ import annotations

import gzip
import importlib.util
import random
import zipfile

import numpy as np
import pytest

from openclaw_vision.text import merges
from openclaw_vision.text.merges import BPE_FILE, TokenizerError, fetch, find_bpe, installed_open_clip_bpe
from openclaw_vision.text.tokenizer import CONTEXT_LENGTH, ClipTokenizer


@pytest.fixture(scope="module")
def reference():
    bpe = installed_open_clip_bpe()
    assert bpe is not None, "open_clip_torch is not installed: `make setup` installs it (--no-deps)"
    spec = importlib.util.spec_from_file_location("open_clip_simple_tokenizer", bpe.parent / "tokenizer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SimpleTokenizer(str(bpe))


@pytest.fixture(scope="module")
def ours():
    return ClipTokenizer()


_POOL = (
    "a photo of a door forklift person robot hallway stairs open closed red blue the dog's cat's ball "
    "café naïve résumé Straße İstanbul ΣΊΣΥΦΟΣ москва 東京 北京大学 서울 القاهرة ירושלים नमस्ते ภาษาไทย "
    "don't I'm we're they've you'll he'd IT'S I’M it‘s O'Neill rock'n'roll "
    "3.14 1,000,000 42nd 2026-11-30 12:34:56 ½ ² ⅻ ٣ ５ ①"
    " ＡＢＣ ﬁnance ſtate Kelvin K ß ǅ Ⅻ e\u0301 n\u0303 a\u200bb \ufeffbom "
    "&amp; &amp;amp; &lt;b&gt; &#39; &eacute; &nbsp; &quot;quoted&quot; "
    "cafÃ© donâ€™t Ã¼ber "
    "<start_of_text> <end_of_text> <|endoftext|> <START_OF_TEXT> "
    "😀 👍🏽 👨\u200d👩\u200d👧 🏳️\u200d🌈 ❤️ ™ © ® ° ± × ÷ µ ¿ ¡ … — – « » „ ‚ "
    "' \" ` ~ ^ | \\ / @ # $ % & * + = < > { } [ ] ( )"
)
WORDS = _POOL.split(" ")
SPACES = (" ", " ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2003", "\u3000", "\x0b", "\x1c", "", "\u2028")


def _random_codepoints(rng: random.Random, n: int) -> str:
    """Any code point of the BMP or the astral planes except surrogates (UTF-8 cannot hold those alone)."""
    out = []
    while len(out) < n:
        cp = rng.choice((rng.randint(0, 0x7F), rng.randint(0x80, 0x2FFF), rng.randint(0x3000, 0xFFFF),
                         rng.randint(0x10000, 0x10FFFF)))  # fmt: skip
        if not 0xD800 <= cp <= 0xDFFF:
            out.append(chr(cp))
    return "".join(out)


def varied_strings(count: int = 3000, seed: int = 13) -> list[str]:
    """Words, punctuation, numbers, scripts, emoji, entities, mojibake and odd whitespace, short and long."""
    rng = random.Random(seed)
    texts = ["", " ", "\t\n", "a", "A photo of a DOOR.", "x" * 400, "word " * 120, "1" * 100, "!?" * 80]
    while len(texts) < count:
        kind = rng.random()
        if kind < 0.6:  # sentences of pool words, glued by varied whitespace
            n = rng.choice((1, 2, 3, 5, 8, 13, 40, 90))
            texts.append("".join(rng.choice(WORDS) + rng.choice(SPACES) for _ in range(n)))
        elif kind < 0.8:  # random code points
            texts.append(_random_codepoints(rng, rng.choice((1, 3, 10, 30, 120))))
        else:  # words with random characters inside and around them
            w = rng.choice(WORDS)
            texts.append(_random_codepoints(rng, 2) + w.upper() + _random_codepoints(rng, 1) + w + rng.choice(SPACES))
    return texts


def test_equal_to_open_clips_simple_tokenizer_on_thousands_of_varied_strings(ours, reference):
    texts = varied_strings()
    assert len(texts) == 3000
    long = 0
    for text in texts:  # the ids before truncation: differences past 77 tokens count too
        assert ours.encode(text) == reference.encode(text), repr(text)
        long += len(ours.encode(text)) > CONTEXT_LENGTH - 2
    assert long > 100  # many strings are cut to 77 tokens: truncation is exercised
    rows = ours(texts)
    assert rows.dtype == np.int64 and rows.shape == (3000, CONTEXT_LENGTH)
    np.testing.assert_array_equal(rows, reference(texts).numpy())


def test_rows_have_start_end_padding_and_keep_the_end_token_when_cut(ours):
    rows = ours(["a photo of a door", "door " * 200, ""])
    assert list(rows[0][:7]) == [49406, 320, 1125, 539, 320, 2489, 49407] and not rows[0][7:].any()
    assert rows[1][0] == 49406 and rows[1][-1] == 49407 and (rows[1][1:-1] != 0).all()
    assert list(rows[2][:3]) == [49406, 49407, 0]
    assert ours.vocab_size == 49408
    # cleaning: HTML entities twice, whitespace runs, case
    assert ours.encode("A &amp;amp;   Door\t") == ours.encode("a & door")


def test_merges_file_is_found_in_the_data_home_before_an_installed_open_clip(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENCLAW_VISION_HOME", str(tmp_path))
    installed = installed_open_clip_bpe()
    assert find_bpe() == installed  # nothing in the data home yet
    wheel = tmp_path / "open_clip_torch-3.3.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:  # a wheel as PyPI ships it, holding the real file
        zf.writestr(f"open_clip/{BPE_FILE}", installed.read_bytes())
        zf.writestr("open_clip/__init__.py", "")
    path = fetch(wheel)
    assert path == tmp_path / "tokenizer" / BPE_FILE and find_bpe() == path
    assert ClipTokenizer().bpe_path == path
    assert find_bpe(installed) == installed  # an explicit path wins


def test_a_wrong_or_missing_merges_file_is_a_clear_error(tmp_path, monkeypatch):
    wrong = tmp_path / BPE_FILE
    wrong.write_bytes(gzip.compress(b"#version: 0.2\ni n\nt h\n"))
    with pytest.raises(TokenizerError, match="is not CLIP's BPE merges file"):
        ClipTokenizer(wrong)
    bad_wheel = tmp_path / "bad.whl"
    with zipfile.ZipFile(bad_wheel, "w") as zf:
        zf.writestr(f"open_clip/{BPE_FILE}", wrong.read_bytes())
    with pytest.raises(TokenizerError, match="is not CLIP's BPE merges file"):
        fetch(bad_wheel, tmp_path / "out" / BPE_FILE)
    assert not (tmp_path / "out" / BPE_FILE).exists()  # nothing lands where it would be used
    with pytest.raises(TokenizerError, match="cannot read open_clip/bpe"):
        fetch(tmp_path / BPE_FILE, tmp_path / "out" / BPE_FILE)  # not a wheel
    monkeypatch.setenv("OPENCLAW_VISION_HOME", str(tmp_path / "empty"))
    monkeypatch.setattr(merges, "installed_open_clip_bpe", lambda: None)
    with pytest.raises(TokenizerError, match="openclaw-vision tokenizer fetch"):
        find_bpe()


def test_makefile_installs_the_pinned_open_clip_without_its_dependencies():
    from pathlib import Path

    make = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    assert f"OPEN_CLIP_VERSION := {merges.OPEN_CLIP_VERSION}" in make
    assert "pip install -q --no-deps 'open_clip_torch==$(OPEN_CLIP_VERSION)'" in make
