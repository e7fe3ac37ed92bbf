"""A run's figures written into docs/figures/, so the docs never carry a measured number typed by hand.

`publish(name, rows, markdown, command)` writes `docs/figures/<name>.json` (the rows, the host, the package
versions, the date and the command) and `docs/figures/<name>.md` (one line naming the machine's CPU, its vector
features and cores, the date and the command, then the run's markdown table). A docs page embeds the markdown
as a generated block, `figures <name>`, which `openclaw-vision docs` copies in and test/test_docs.py checks: a
figure published again updates its page, and a published figure no page shows is an error.

The bench (`bench --docs NAME`) and the figure scripts (`scripts/*_figures.py --docs NAME`) call it. Figures are
only ever compared within one run (speeds as ratios measured side by side); the CPU line says which machine
the run's ratios belong to, since the machines here change between AVX2, AVX-512 VNNI and AMX. A run made on
another machine (the GPU check, on a lent machine with no checkout to publish into) records `measured_on()`
there and is published here with it, so the line names the machine that measured, not the one that wrote.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from ..core import cpu
from .harness import host_info, versions

#: where published figures live in a checkout (docs/ is not installed: publishing is a developer's act)
FOLDER = Path(__file__).resolve().parents[2] / "docs" / "figures"
NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


def machine_line(host: dict, features: str, date: str, command: str) -> str:
    """The figures' first line: where and when they were measured, and what printed them."""
    gpu = f" with {host['gpu']}" if host.get("gpu") else ""
    return (f"Measured {date} on {host['cpu']} ({host['cores']} cores; {features}){gpu} by `{command}`; every"
            " column is in the JSON beside this file.")  # fmt: skip


def measured_on(**extra_host) -> dict:
    """This machine, now: the host (plus `extra_host`, e.g. the GPU), its vector features, the date, the versions."""
    return {"host": {**host_info(), **extra_host}, "vector_features": cpu.vector_features(),
            "date": time.strftime("%Y-%m-%d", time.gmtime()), "versions": versions()}  # fmt: skip


def without_title(markdown: str) -> str:
    """The run's markdown without its own "# ..." title: the docs page that shows it has its own headings."""
    text = markdown.strip()
    return text.split("\n", 1)[1].strip() if text.startswith("# ") else text


def publish(name: str, rows, markdown: str, command: str, folder: Path = FOLDER,
            measured: dict | None = None) -> tuple[Path, Path]:  # fmt: skip
    """Write `<name>.json` and `<name>.md` into `folder`; returns both paths. `measured`: `measured_on()` as the
    run's machine recorded it, when that was not this one."""
    if not NAME.fullmatch(name):
        raise ValueError(f"figures name {name!r}: lower-case letters, digits and dashes only")
    folder.mkdir(parents=True, exist_ok=True)
    m = measured or measured_on()
    host, features, date = m["host"], m["vector_features"], m["date"]
    record = {"name": name, "command": command, "measured": date, "host": {**host, "vector_features": features},
              "versions": m["versions"], "rows": rows}  # fmt: skip
    js, md = folder / f"{name}.json", folder / f"{name}.md"
    js.write_text(json.dumps(record, indent=1) + "\n")
    md.write_text(machine_line(host, features, date, command) + "\n\n" + without_title(markdown) + "\n")
    return js, md
