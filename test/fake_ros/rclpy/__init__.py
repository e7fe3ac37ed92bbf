"""rclpy's module functions (Humble rclpy/__init__.py, context.py): keyword-only, one init per context."""

from __future__ import annotations

import sys

from .node import Node

_context = {"ok": False, "args": []}


class NotInitializedException(Exception):
    pass


def init(*, args=None, context=None, domain_id=None) -> None:
    if _context["ok"]:
        raise RuntimeError("Context.init() must only be called once")
    _context.update(ok=True, args=list(sys.argv if args is None else args))


def ok(*, context=None) -> bool:
    return _context["ok"]


def shutdown(*, context=None) -> None:
    if not _context["ok"]:
        raise RuntimeError("Context must be initialized before it can be shutdown")
    _context.update(ok=False, args=[])


def create_node(node_name, *, context=None, cli_args=None, namespace=None, use_global_arguments=True,
                enable_rosout=True, start_parameter_services=True, parameter_overrides=None,
                allow_undeclared_parameters=False,
                automatically_declare_parameters_from_overrides=False) -> Node:  # fmt: skip
    if not _context["ok"]:
        raise NotInitializedException("cannot create node")
    args = (_context["args"] if use_global_arguments else []) + list(cli_args or [])
    return Node(node_name, args)
