"""What a family of magics is made of (IPython's ``core/magic.py``).

A family is a ``MagicFamily`` subclass whose methods are marked with
``line_magic`` or ``cell_magic``; ``magics.Magics`` enters every marked
name of every family in its one table. A line magic is called as
``method(arg, frame)``, a cell magic as ``method(line, body, body_lineno,
frame)``, where frame is the cell's (its namespace).
"""

from __future__ import annotations

import builtins
from typing import Any, Callable

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc

LINE, CELL = "line", "cell"


def _mark(kind: str, name: str, listed: bool) -> Callable[[Callable], Callable]:
    def mark(fn: Callable) -> Callable:
        names = fn.__dict__.setdefault("magic_names", [])
        names.append((kind, name, listed))
        return fn
    return mark


def line_magic(name: str, *, listed: bool = True) -> Callable[[Callable], Callable]:
    """Mark a method as the line magic ``%name``; stack it for aliases
    (listed=False keeps a name out of %lsmagic and error messages)."""
    return _mark(LINE, name, listed)


def cell_magic(name: str, *, listed: bool = True) -> Callable[[Callable], Callable]:
    """Mark a method as the cell magic ``%%name`` (see line_magic)."""
    return _mark(CELL, name, listed)


class MagicFamily:
    """A family of magics (IPython's ``Magics`` subclasses): one instance
    per session, holding the family's state."""

    def __init__(self, shell: Any) -> None:  # a magics.Magics
        self.shell = shell

    @property
    def session(self) -> Any:  # a session.Session
        return self.shell.session
