"""The docs say what the code says: generated tables equal the code's, and every relative link resolves.

The parameter tables, the CLI commands and flags, the launch arguments, the backends, the wire types and
the layers in README.md and docs/ are written by `openclaw-vision docs` (openclaw_vision/cli/docs_tables.py)
from the code. A change to a default, a flag, a choice or a description without rerunning it fails here,
naming the block and the command that rewrites it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from openclaw_vision.cli import docs_tables
from openclaw_vision.runtime import config

ROOT = Path(__file__).resolve().parents[1]
FIX = "run `.venv/bin/openclaw-vision docs` to regenerate them"


def test_every_generated_table_equals_the_code():
    stale = docs_tables.regenerate(ROOT, write=False)
    assert not stale, "the docs' generated tables differ from the code — " + FIX + ":\n" + "\n".join(stale)


def test_every_relative_link_in_the_readme_and_docs_resolves():
    assert not docs_tables.broken_links(ROOT), "\n".join(docs_tables.broken_links(ROOT))


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """README, docs/, msg/, srv/ and .importlinter in a folder of their own, to break on purpose."""
    for name in ("README.md", ".importlinter"):
        shutil.copy(ROOT / name, tmp_path / name)
    for folder in ("docs", "msg", "srv"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    return tmp_path


def test_a_changed_default_a_lost_flag_or_a_lost_block_is_caught_and_rewritten(copy: Path, monkeypatch):
    params = copy / "docs" / "parameters.md"
    depth = f"| `depth` | int | `{config.EncoderConfig().depth}` |"
    assert depth in params.read_text()  # the encoder's depth default, as runtime/config.py has it
    params.write_text(params.read_text().replace(depth, "| `depth` | int | `5` |"))
    flags = copy / "docs" / "cli.md"
    flags.write_text(flags.read_text().replace("| `--checkpoint` |", "| `--weights` |", 1))
    readme = copy / "README.md"
    readme.write_text(readme.read_text().replace("GENERATED cli-commands", "GENERATED nothing"))
    stale = docs_tables.regenerate(copy, write=False)
    assert "docs/parameters.md: block 'parameters encoder_node' differs from the code" in stale
    assert "docs/cli.md: block 'cli-flags' differs from the code" in stale
    assert any("unknown generated block 'nothing'" in p for p in stale)
    assert "block 'cli-commands' is in no page (README.md or docs/)" in stale
    docs_tables.regenerate(copy, write=True)  # what `openclaw-vision docs` does: the tables are the code's again
    assert depth in params.read_text() and "| `--weights` |" not in flags.read_text()


def test_a_link_to_a_missing_page_file_or_heading_is_caught(copy: Path):
    page = copy / "docs" / "gpu.md"
    page.write_text(page.read_text() + "\n[a](nowhere.md) [b](triton.md#no-such-heading) [c](../../outside.md)"
                    " [d](triton.md#triton-the-model-on-another-machine) [e](https://example.org/x.md)\n")  # fmt: skip
    broken = docs_tables.broken_links(copy)
    assert broken == [
        "docs/gpu.md: (nowhere.md): no such file in the repository",
        "docs/gpu.md: (triton.md#no-such-heading): no heading with that anchor in triton.md",
        "docs/gpu.md: (../../outside.md): no such file in the repository",
    ]


def test_the_readme_is_short_and_names_every_node_message_and_service():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    wire = sorted(p.relative_to(ROOT).as_posix() for p in [*ROOT.glob("msg/*.msg"), *ROOT.glob("srv/*.srv")])
    assert wire and all(f"`{name}`" in readme for name in wire)
    for node in docs_tables.nodes():
        assert f"`{node.name}`" in readme, node.name
    assert "shared/DESIGN.md" not in readme  # a file outside the repository is not pointed at as if inside


def test_published_figures_name_the_machine_and_a_page_shows_them_as_published(copy: Path):
    """A run's figures reach the docs only through bench/figures.py: the file names the CPU, the date and the
    command, a page's `figures` block is that file, republishing makes the block stale until `docs` copies it
    in, and a published figure that no page shows is an error."""
    from openclaw_vision.bench import figures
    from openclaw_vision.core import cpu

    folder = copy / "docs" / "figures"
    rows = [{"variant": "ours", "b1_ms": 12.5}]
    js, md = figures.publish("toy-run", rows, "| variant | b1 ms |\n|---|---|\n| ours | 12.5 |", "toy --x 1", folder)
    first = md.read_text().splitlines()[0]
    assert cpu.model_name() in first and "`toy --x 1`" in first and cpu.vector_features() in first
    record = json.loads(js.read_text())
    assert record["rows"] == rows and record["host"]["cpu"] == cpu.model_name() and record["command"] == "toy --x 1"
    assert "block 'figures toy-run' is in no page (README.md or docs/)" in docs_tables.regenerate(copy, write=False)

    page = copy / "docs" / "benchmarks.md"
    page.write_text(page.read_text() + "\n" + docs_tables.block("figures toy-run", "") + "\n")
    assert "docs/benchmarks.md: block 'figures toy-run' differs from the code" in docs_tables.regenerate(copy)
    assert "| ours | 12.5 |" in page.read_text() and first in page.read_text()
    # a bench's markdown opens with its own "# ..." title: the page has its headings, the block has the table
    figures.publish("toy-run", [{"variant": "ours", "b1_ms": 11.0}], "# toy bench\n\n| ours | 11.0 |", "toy --x 2",
                    folder)  # fmt: skip
    assert md.read_text().splitlines()[1:] == ["", "| ours | 11.0 |"]
    stale = docs_tables.regenerate(copy, write=False)
    assert stale == ["docs/benchmarks.md: block 'figures toy-run' differs from the code"]
    with pytest.raises(ValueError, match="lower-case"):
        figures.publish("Toy Run", rows, "", "toy", folder)
