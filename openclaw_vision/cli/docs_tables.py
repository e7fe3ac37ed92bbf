"""The docs' tables that the code already knows, written from the code: `openclaw-vision docs`.

README.md and docs/*.md hold blocks between two marker lines,

    <!-- BEGIN GENERATED parameters encoder_node (openclaw-vision docs) -->
    <!-- END GENERATED parameters encoder_node -->

and this module renders each block from its source of truth: every node's parameters from its
`config.Param`s, the launch arguments from `ros/launch_args.py`, every command and flag from the
parsers the commands declare (cli.COMMANDS; a node's from `runner.node_parser`), the backends from
`encoders/backends.py`, the wire types from msg/ and srv/, the layers from `.importlinter`, and a run's
measured figures from the file it published in docs/figures/ (bench/figures.py). A table
typed by hand drifts from the code (the README once said the encoder's depth default was 5 while
runtime/config.py said 32); a generated one cannot, because test/test_docs.py fails on any difference and
says to run `openclaw-vision docs`. The same check finds relative links that do not resolve.

Above cli in the layer order: it reads the command table and every command's parser.
"""

from __future__ import annotations

import argparse
import configparser
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .. import cli
from ..core.commands import Command
from ..runtime import config as cfgmod

ROOT = Path(__file__).resolve().parents[2]
COMMAND_LINE = "openclaw-vision docs"
BLOCK = re.compile(
    r"<!-- BEGIN GENERATED (?P<name>[\w -]+?) \(openclaw-vision docs\) -->\n(?P<body>.*?)"
    r"<!-- END GENERATED (?P=name) -->",
    re.S,
)


@dataclass(frozen=True)
class Node:
    """A node command of cli.COMMANDS (its target is `ros.<name>:main`), with its configuration."""

    command: str  # "encoder"
    name: str  # "encoder_node"
    config: type  # EncoderConfig
    yaml: str  # "encoder.yaml"


def nodes() -> list[Node]:
    """Every node the command line runs. Each node module is `ros/<stem>_node.py`, its configuration
    `config.<Stem>Config`, its parameters file `config/<stem>.yaml` (the names every node keeps)."""
    found = []
    for command, (target, _) in cli.COMMANDS.items():
        module, attr = target.split(":")
        if module.startswith("ros.") and module.endswith("_node") and attr == "main":
            stem = module.removeprefix("ros.").removesuffix("_node")
            found.append(Node(command, f"{stem}_node", getattr(cfgmod, f"{stem.capitalize()}Config"), f"{stem}.yaml"))
    return found


def cell(value: Any) -> str:
    """Text for one markdown table cell: pipes escaped, never a line break, and outside `code` spans `<`
    and `>` as entities (a description's `<model>` is not an HTML tag)."""
    spans = str(value).replace("|", "\\|").replace("\n", " ").split("`")
    return "`".join(s if i % 2 else s.replace("<", "&lt;").replace(">", "&gt;") for i, s in enumerate(spans))


def code(value: Any) -> str:
    """A value as it is written in a parameters file or on a command line, in backticks."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, tuple | list):
        text = "[" + ", ".join(map(str, value)) + "]"
    elif isinstance(value, str):
        text = value if value else '""'
    else:
        text = f"{value!r}"
    return f"`{text}`"


def table(header: tuple[str, ...], rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def parameters(node: Node) -> str:
    """One node's keys: type, default, limits, whether `ros2 param set` may change it, description."""
    defaults = node.config()
    rows = []
    for f in fields(node.config):
        spec: cfgmod.Param = f.metadata["param"]
        default = getattr(defaults, f.name)
        kind = cfgmod.TYPE_NAMES.get(type(default), type(default).__name__)
        rows.append(
            (f"`{f.name}`", kind, code(default), spec.limits(), "yes" if spec.runtime else "", spec.description)
        )
    return table(("key", "type", "default", "limits", "run time", "description"), rows)


def launch_arguments() -> str:
    """The launch file's overriding arguments, the nodes each one sets, and what `--show-args` says."""
    from ..ros import launch_args

    rows = [(f"`{name}:=`", ", ".join(launch_args.argument_nodes(name)), launch_args.argument_description(name))
            for name in launch_args.ARGUMENTS]  # fmt: skip
    return table(("argument", "sets a parameter of", "description (`--show-args`)"), rows)


def cli_commands() -> str:
    """Every command with its one-line help, as `openclaw-vision --help` lists them."""
    return table(
        ("command", "what it does"), [(f"`openclaw-vision {n}`", text) for n, (_, text) in cli.COMMANDS.items()]
    )


def _parser(name: str, target: str) -> tuple[argparse.ArgumentParser, Node | None]:
    """The parser `openclaw-vision NAME` parses with, and the node it runs (None for a tool)."""
    node = next((n for n in nodes() if n.command == name), None)
    if node is not None:
        from ..ros.runner import node_parser

        return node_parser(f"openclaw-vision {name}", node.name, node.config, node.yaml), node
    module, attr = target.split(":")
    command = getattr(importlib.import_module(f"openclaw_vision.{module}"), attr)
    if not isinstance(command, Command):
        raise TypeError(f"{target} is neither a Command nor a node main (ros.<stem>_node:main)")
    parser = argparse.ArgumentParser(prog=f"openclaw-vision {name}")
    command.add_arguments(parser)
    return parser, None


def _flag_row(parser: argparse.ArgumentParser, action: argparse.Action) -> tuple[str, str, str, str]:
    names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.option_strings and action.nargs == 0:  # a switch
        default = "off" if not action.default else "on"
    elif action.default in (None, argparse.SUPPRESS):
        default = ""
    else:
        default = code(action.default)
    values = " | ".join(map(str, action.choices)) if action.choices else ""
    text = parser._get_formatter()._expand_help(action) if action.help else ""  # %(default)s as --help shows it
    return names, default, values, text


def cli_flags() -> str:
    """Every command's flags and positional arguments; a node's own flags, its parameters by reference."""
    parts = []
    for name, (target, text) in cli.COMMANDS.items():
        parser, node = _parser(name, target)
        keys = set(node.config.params()) if node else set()
        actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction) and a.dest not in keys]
        parts.append(f"### `openclaw-vision {name}`\n\n{text}.")
        if node:
            first = next(iter(node.config.params())).replace("_", "-")
            parts.append(f"Also one flag per parameter of `{node.name}` (`--{first}` …; "
                         f"underscores as dashes): [parameters.md](parameters.md).")  # fmt: skip
        rows = [_flag_row(parser, a) for a in actions]
        parts.append(table(("flag", "default", "values", "what it does"), rows) if rows else "No flags.\n")
    return "\n\n".join(p.rstrip("\n") for p in parts) + "\n"


def backends() -> str:
    """The one backend table, in `auto` order."""
    from ..encoders import backends as table_module

    rows = [(f"`{b.name}`", b.description, "GPU" if b.gpu else "CPU" if b.cpu_runtime else "remote",
             "yes" if b.auto else "never", b.install or "always installed") for b in table_module.TABLE]  # fmt: skip
    return table(("backend", "what runs the model", "where", "picked by auto", "needs"), rows)


def interfaces(root: Path = ROOT) -> str:
    """msg/ and srv/ with the opening comment of each file: what it carries."""
    rows = []
    for path in sorted([*root.glob("msg/*.msg"), *root.glob("srv/*.srv")]):
        lines = path.read_text().splitlines()
        opening = []
        for line in lines:
            if not line.startswith("#"):
                break
            opening.append(line.lstrip("# ").strip())
        kind = "service" if path.suffix == ".srv" else "message"
        rows.append((f"`{path.relative_to(root).as_posix()}`", kind, " ".join(opening)))
    return table(("file", "kind", "what it carries"), rows)


def layers(root: Path = ROOT) -> str:
    """`.importlinter`'s layer order, highest first."""
    parser = configparser.ConfigParser()
    parser.read(root / ".importlinter")
    rows = [line.strip() for line in parser["importlinter:contract:layers"]["layers"].splitlines() if line.strip()]
    return "\n".join(f"{i}. " + " | ".join(f"`{m.strip()}`" for m in row.split("|")) for i, row in
                     enumerate(rows, 1)) + "\n"  # fmt: skip


def renderers(root: Path = ROOT) -> dict[str, Callable[[], str]]:
    """Every generated block by name: each must appear exactly once in README.md or docs/."""
    out: dict[str, Callable[[], str]] = {
        "cli-commands": cli_commands,
        "cli-flags": cli_flags,
        "launch-arguments": launch_arguments,
        "backends": backends,
        "interfaces": lambda: interfaces(root),
        "layers": lambda: layers(root),
    }
    for node in nodes():
        out[f"parameters {node.name}"] = lambda node=node: parameters(node)
    for figures in sorted((root / "docs" / "figures").glob("*.md")):  # what a run published (bench/figures.py)
        out[f"figures {figures.stem}"] = figures.read_text
    return out


def pages(root: Path = ROOT) -> list[Path]:
    """The documentation: README.md and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def block(name: str, body: str) -> str:
    """A generated block with its two marker lines."""
    return f"<!-- BEGIN GENERATED {name} (openclaw-vision docs) -->\n{body}<!-- END GENERATED {name} -->"


def regenerate(root: Path = ROOT, write: bool = True) -> list[str]:
    """Render every block; with `write`, put the new text in place. Returns what differed from the code
    (with write=False: what is stale; an empty list: the docs say what the code says)."""
    render = renderers(root)
    problems, seen = [], {}
    for page in pages(root):
        text, where = page.read_text(), page.relative_to(root).as_posix()
        new = text
        for match in BLOCK.finditer(text):
            name = match["name"]
            if name not in render:
                problems.append(f"{where}: unknown generated block {name!r} (known: {', '.join(render)})")
                continue
            if name in seen:
                problems.append(f"{where}: block {name!r} also in {seen[name]}")
            seen[name] = where
            body = render[name]()
            if match["body"] != body:
                problems.append(f"{where}: block {name!r} differs from the code")
                new = new.replace(match[0], block(name, body), 1)
        if write and new != text:
            page.write_text(new)
    problems += [f"block {name!r} is in no page (README.md or docs/)" for name in render if name not in seen]
    return problems


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors a page's headings get (a repeated heading: -1, -2, ... as GitHub numbers them)."""
    out, counts = set(), {}
    for line in _without_code(page.read_text()).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            base = slug(m[1])
            n = counts.get(base, 0)
            counts[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def _without_code(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def broken_links(root: Path = ROOT) -> list[str]:
    """Every relative link of README.md and docs/ whose file (inside the repository) or heading is missing."""
    problems = []
    for page in pages(root):
        for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", _without_code(page.read_text())):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(root).as_posix()}: ({target})"
            if root.resolve() not in (dest, *dest.parents) or not dest.exists():
                problems.append(f"{where}: no such file in the repository")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where}: no heading with that anchor in {dest.name}")
    return problems


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="only compare: exit 1 if a table or a link is stale")


def run(args: argparse.Namespace) -> int:
    """--check: print what is stale and exit 1 if anything is. Otherwise rewrite the stale blocks, say which,
    and exit 1 only for what rewriting cannot fix (a missing or unknown block, a broken link)."""
    if args.check:
        problems = regenerate(write=False)
    else:
        found = regenerate(write=True)
        stale = [p for p in found if p.endswith("differs from the code")]
        for line in stale:
            print(f"rewrote {line.removesuffix(' differs from the code')}")
        problems = [p for p in found if p not in stale]
    problems += broken_links()
    for line in problems:
        print(line)
    return 1 if problems else 0


COMMAND = Command(add_arguments, run)
