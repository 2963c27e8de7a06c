"""Rendering: the simulated server's records and documents, as OpenPBS prints them."""

from __future__ import annotations

from typing import Any

__all__ = ["copy_record"]

# The only nested values of a job record (flat dicts of scalars).
_NESTED = ("Resource_List", "resources_used", "Variable_List")


def copy_record(native: dict[str, Any]) -> dict[str, Any]:
    """A copy that shares nothing mutable with ``native`` (its only nested
    values are flat dicts of scalars)."""
    out = native.copy()
    for key in _NESTED:
        value = out.get(key)
        if value is not None:
            out[key] = value.copy()
    return out
