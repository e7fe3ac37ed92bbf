"""What an `openclaw-vision` subcommand is, and flags whose defaults come from a dataclass field.

Every subcommand is a `Command` defined beside the code it drives: `add_arguments(parser)` declares
its flags (choices from that code's constants), `run(args)` does the work and returns the exit
status. cli/__init__.py only lists the commands and dispatches to them. A command that must see its
command line untouched (a node: its `--ros-args` for rclpy) is a plain `main(argv) -> int`
instead and parses it itself.

`field_flag` declares a flag that sets one field of an options dataclass (or one parameter of a
function), with that field's default (and, from it, its type and for a bool its action), so no
default is written twice; `from_args` builds the dataclass (or calls the function) from the flags.
It is the one dataclass-to-flag generator: a node's flags (config.add_arguments, one per key of its
configuration) are made with it too.

A leaf: no package imports (command modules of every layer use it).
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any


@dataclass(frozen=True)
class Command:
    """One subcommand: its flags and what runs it (the exit status)."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _defaults(source: Any) -> dict[str, Any]:
    """name → default of a dataclass's fields (default_factory called) or of a function's keyword parameters."""
    if is_dataclass(source):
        out = {}
        for f in fields(source):
            if f.default is not MISSING:
                out[f.name] = f.default
            elif f.default_factory is not MISSING:
                out[f.name] = f.default_factory()
        return out
    params = inspect.signature(source).parameters.values()
    return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}


def field_default(source: Any, name: str) -> Any:
    """The default of field (or parameter) `name` of `source`, a dataclass or a function."""
    defaults = _defaults(source)
    if name not in defaults:
        raise ValueError(f"{getattr(source, '__qualname__', source)} has no default for {name!r} to give a flag")
    return defaults[name]


def field_flag(parser: argparse.ArgumentParser, flag: str, source: Any, name: str | None = None, **kw: Any) -> None:
    """`flag` setting field `name` of `source` (a dataclass, or a function's parameter; by default the
    flag's own name, dashes as underscores).

    The default is the field's; its type is the default's type unless `type` is given (a None default
    needs it). A bool field is a switch that flips its default: `--no-memory` for `measure_memory=True`,
    `--lockstep` for `lockstep=False`. A `default` in `kw` is the flag's when it is not given (None: "not
    set", for a layer such as a parameters file below the flags to decide), its type still the field's."""
    own = flag.lstrip("-").replace("-", "_")
    name = name or own
    default = field_default(source, name)
    if isinstance(default, bool):
        kw.setdefault("action", "store_false" if default else "store_true")
    else:
        if "choices" not in kw:  # what --help shows: the choices, or the flag's name (not the field's)
            kw.setdefault("metavar", own.upper())
        if default is not None and "action" not in kw:
            kw.setdefault("type", type(default))
    kw.setdefault("default", default)
    parser.add_argument(flag, dest=name, **kw)


def from_args(target: Any, args: argparse.Namespace, **given: Any) -> Any:
    """`target` (a dataclass, or a function) called with the parsed flags named as its fields or parameters
    (see `field_flag`); `given` wins over them."""
    names = [f.name for f in fields(target) if f.init] if is_dataclass(target) else inspect.signature(target).parameters
    values = {n: getattr(args, n) for n in names if hasattr(args, n)}
    return target(**{**values, **given})
