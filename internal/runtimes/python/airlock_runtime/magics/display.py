"""Cells shown as rich output (IPython's ``core/magics/display.py``):
``%%html``, ``%%markdown``, ``%%latex``, ``%%svg``, ``%%javascript``."""

from __future__ import annotations

import builtins
import types

from ..display import HTML, SVG, Latex, Markdown, display
from ..tracebacks import UsageError
from .magic import MagicFamily, cell_magic

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc


class DisplayMagics(MagicFamily):
    @cell_magic("html")
    @cell_magic("HTML", listed=False)
    def html(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%html: display the cell as HTML."""
        display(HTML(body))

    @cell_magic("markdown")
    @cell_magic("md", listed=False)
    def markdown(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%markdown: display the cell as Markdown."""
        display(Markdown(body))

    @cell_magic("latex")
    def latex(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%latex: display the cell as LaTeX."""
        display(Latex(body))

    @cell_magic("svg")
    def svg(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%svg: display the cell as SVG."""
        display(SVG(body))

    @cell_magic("javascript")
    @cell_magic("js", listed=False)
    def javascript(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%javascript: not available (airlock has no browser to run it)."""
        raise UsageError("%%javascript is not supported: there is no browser to run it")
