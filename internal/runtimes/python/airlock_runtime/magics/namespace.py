"""The user's namespace (IPython's ``core/magics/namespace.py``):
``%who``, ``%whos``, ``%reset``."""

from __future__ import annotations

import builtins
import types

from .. import current
from .magic import MagicFamily, line_magic

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc


class NamespaceMagics(MagicFamily):
    @line_magic("who")
    def who(self, arg: str, frame: types.FrameType) -> None:
        """%who: names of the user's variables."""
        names = self._user_names()
        print("\t".join(names) if names else "Interactive namespace is empty.")

    @line_magic("whos")
    def whos(self, arg: str, frame: types.FrameType) -> None:
        """%whos: the user's variables with their types and values."""
        names = self._user_names()
        if not names:
            print("Interactive namespace is empty.")
            return
        ns = self.session.ns
        rows = []
        for n in names:
            v = ns[n]
            try:
                info = repr(v).replace("\n", " ")
            except Exception:  # noqa: BLE001
                info = current.fallback_repr(v)
            rows.append((n, type(v).__name__, info[:60] + ("..." if len(info) > 60 else "")))
        w1 = max(len("Variable"), *(len(r[0]) for r in rows))
        w2 = max(len("Type"), *(len(r[1]) for r in rows))
        out = [f"{'Variable':<{w1}}   {'Type':<{w2}}   Data/Info", "-" * (w1 + w2 + 20)]
        out += [f"{a:<{w1}}   {b:<{w2}}   {c}" for a, b, c in rows]
        print("\n".join(out))

    def _user_names(self) -> list[str]:
        return sorted(n for n in self.session.ns if not n.startswith("_")
                      and n not in self.session.initial_names)

    @line_magic("reset")
    def reset(self, arg: str, frame: types.FrameType) -> None:
        """%reset [-f]: delete all user variables (never asks)."""
        self.session.reset_namespace()
