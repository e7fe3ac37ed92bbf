"""The package's one error base: every error openclaw_vision raises on purpose is an `OpenclawError`.

Each error class keeps its builtin base too (ValueError for bad input, RuntimeError for a step that
failed), so existing `except ValueError` callers still work; a caller (or the CLI's exit codes)
that wants "any error this package explains" catches `OpenclawError`, and anything else is a bug.
"""

from __future__ import annotations


class OpenclawError(Exception):
    """An error of openclaw_vision with a message meant for the user (what went wrong, what to do)."""
