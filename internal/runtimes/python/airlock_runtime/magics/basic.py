"""The rest (IPython's ``core/magics/basic.py``, with what its config,
extension and pylab families do in a notebook, accepted here):
``%lsmagic``, ``%config``, ``%xmode``, ``%matplotlib``, ``%load_ext``,
``%autoreload``."""

from __future__ import annotations

import builtins
import types

from .. import current
from .magic import CELL, LINE, MagicFamily, line_magic

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc


class BasicMagics(MagicFamily):
    @line_magic("lsmagic")
    def lsmagic(self, arg: str, frame: types.FrameType) -> None:
        """%lsmagic: list the supported magics."""
        print("Line magics: " + self.shell.available(LINE))
        print("Cell magics: " + self.shell.available(CELL))
        print("Shell: !cmd, !!cmd, x = !cmd ({expr} and $name are expanded)")

    @line_magic("matplotlib")
    def matplotlib(self, arg: str, frame: types.FrameType) -> None:
        """%matplotlib [inline]: figures are always shown inline; accepted."""
        if arg.strip() not in ("", "inline"):
            current.warn(f"airlock: %matplotlib {arg.strip()} is not available; figures are shown inline")

    @line_magic("config")
    def config(self, arg: str, frame: types.FrameType) -> None:
        """%config: IPython configuration does not apply; accepted and ignored."""

    @line_magic("xmode")
    def xmode(self, arg: str, frame: types.FrameType) -> None:
        """%xmode: accepted and ignored."""

    @line_magic("load_ext")
    @line_magic("reload_ext", listed=False)
    @line_magic("unload_ext", listed=False)
    def load_ext(self, arg: str, frame: types.FrameType) -> None:
        """%load_ext: IPython extensions are not available; ignored with a note."""
        current.warn(f"airlock: IPython extensions are not supported; ignored: {arg.strip()}")

    @line_magic("autoreload")
    @line_magic("aimport", listed=False)
    def autoreload(self, arg: str, frame: types.FrameType) -> None:
        """%autoreload: not supported; ignored (use importlib.reload)."""
