"""The session's compiler (IPython's ``core/compilerop.py``): ``codeop``'s,
so that a ``from __future__`` import in one cell is in force in every
later one, and in the statements ``%time`` and ``%timeit`` compile.
"""

from __future__ import annotations

import ast
import builtins
import codeop
from typing import Any

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc


class CellCompiler(codeop.Compile):
    """``codeop.Compile``, which remembers the futures of what it compiled
    in ``flags``. Only futures stay there: codeop's incomplete-input flags
    are for a console reading line by line (they change SyntaxErrors),
    and per-call flags (top-level await) are given to each call."""

    def __init__(self) -> None:
        super().__init__()
        self.flags = 0
        # codeop finds compile among the builtins, which user code may
        # patch (see the package doc): give it the real one as its own
        # global, found first.
        codeop.compile = compile

    def ast_parse(self, source: str, filename: str, flags: int = 0) -> ast.Module:
        """Parse source with the futures in force (and flags)."""
        return compile(source, filename, "exec", self.flags | flags | ast.PyCF_ONLY_AST, True)

    def __call__(self, source: Any, filename: str, symbol: str, flags: int = 0) -> Any:
        """Compile source (text or a tree) with the futures in force (and
        flags); its own futures stay in force."""
        futures = self.flags
        self.flags = futures | flags
        try:
            return super().__call__(source, filename, symbol)
        finally:
            self.flags = futures | (self.flags & ~flags)
