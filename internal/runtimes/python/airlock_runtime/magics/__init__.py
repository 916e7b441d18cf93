"""IPython's magics: what ``!cmd``, ``%magic`` and ``%%cell magic`` lines
call once ``syntax.transform_cell`` has turned them into Python.

``Magics`` is the ``__airlock__`` builtin: its entry points (``system``,
``getoutput``, ``line_magic``, ``cell_magic``) and the one table of every
family's magics. The families follow IPython's ``core/magics/``:

    osm         the shell and the filesystem: !cmd, !!cmd, %cd, %pwd,
                %env, %ls & co., %%writefile
    execution   %time, %timeit, %run, %%time, %%timeit, %%capture
    namespace   %who, %whos, %reset
    packaging   %pip; pip install through the server's index
    script      %%script, %%bash, %%sh, %%python3
    display     %%html, %%markdown, %%latex, %%svg, %%javascript
    basic       %lsmagic, and notebook magics accepted (%matplotlib, ...)
    magic       what a family is made of: MagicFamily, line_magic, cell_magic

Names, arguments and output follow IPython's.
"""

from __future__ import annotations

import builtins
import sys
from typing import Any, Callable

from ..tracebacks import UsageError
from . import basic, display, execution, namespace, osm, packaging, script
from .magic import CELL, LINE
from .packaging import PackageInstallError

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc

__all__ = ["Magics", "PackageInstallError"]

FAMILIES = (osm.OSMagics, execution.ExecutionMagics, namespace.NamespaceMagics,
            packaging.PackagingMagics, script.ScriptMagics, display.DisplayMagics,
            basic.BasicMagics)


def _table() -> dict[str, dict[str, tuple[type, str, bool]]]:
    """{kind: {name: (family, method name, listed)}} of every family's magics."""
    table: dict[str, dict[str, tuple[type, str, bool]]] = {LINE: {}, CELL: {}}
    for family in FAMILIES:
        for attr, fn in vars(family).items():
            for kind, name, listed in getattr(fn, "magic_names", ()):
                if name in table[kind]:
                    raise RuntimeError(f"{kind} magic {name} defined twice")
                table[kind][name] = (family, attr, listed)
    return table


_TABLE = _table()  # once, at import (a template's children share it)


class Magics:
    """The ``__airlock__`` builtin: what transformed magic lines call."""

    def __init__(self, session: Any) -> None:  # a session.Session
        self.session = session
        families = {f: f(self) for f in FAMILIES}
        self.magics: dict[str, dict[str, Callable]] = {
            kind: {name: getattr(families[f], attr) for name, (f, attr, _) in names.items()}
            for kind, names in _TABLE.items()}

    # -- entry points called by transformed code --

    def system(self, cmd: str) -> None:
        """``!cmd``: as ``%system cmd``."""
        return self.magics[LINE]["system"](cmd, sys._getframe(1))

    def getoutput(self, cmd: str) -> osm.SList:
        """``!!cmd`` / ``x = !cmd``: as ``%sx cmd``."""
        return self.magics[LINE]["sx"](cmd, sys._getframe(1))

    def line_magic(self, name: str, arg: str) -> Any:
        fn = self.magics[LINE].get(name)
        if fn is None:
            hint = ("" if name not in self.magics[CELL]
                    else f" (`%%{name}` is a cell magic: put it on the first line of the cell)")
            raise UsageError(f"Line magic function `%{name}` not found{hint}. "
                             f"Available: {self.available(LINE)}.")
        return fn(arg, sys._getframe(1))

    def cell_magic(self, name: str, line: str, body: str, body_lineno: int) -> Any:
        fn = self.magics[CELL].get(name)
        if fn is None:
            raise UsageError(f"Cell magic `%%{name}` not found. "
                             f"Available: {self.available(CELL)}.")
        return fn(line, body, body_lineno, sys._getframe(1))

    def available(self, kind: str) -> str:
        """The listed magics of a kind, for messages: '%a, %b'."""
        sigil = "%" if kind == LINE else "%%"
        return ", ".join(sigil + n for n in sorted(n for n, (_, _, listed) in _TABLE[kind].items() if listed))
