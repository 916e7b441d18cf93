"""Cells run by another program (IPython's ``core/magics/script.py``):
``%%script``, ``%%bash``, ``%%sh``, ``%%python3``."""

from __future__ import annotations

import builtins
import subprocess  # here, not lazily: an interrupt landing halfway through its import leaves threading broken for the session
import sys
import types

from .. import current
from ..tracebacks import UsageError
from .magic import MagicFamily, cell_magic

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc


class ScriptMagics(MagicFamily):
    @cell_magic("script")
    def script(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%script PROGRAM [--no-raise-error]: run the body with PROGRAM (on its stdin)."""
        import shlex
        argv = [w for w in shlex.split(line) if w != "--no-raise-error"]
        if not argv:
            raise UsageError("%%script needs a program, e.g. %%script bash")
        current.flush_stdio()
        try:
            proc = subprocess.run(argv, input=body.encode("utf-8"))
        except KeyboardInterrupt:
            raise KeyboardInterrupt from None
        frame.f_globals["_exit_code"] = proc.returncode
        if proc.returncode != 0 and "--no-raise-error" not in line.split():
            raise subprocess.CalledProcessError(proc.returncode, line.strip())

    @cell_magic("bash")
    def bash(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%bash: run the cell with bash."""
        self.script(f"bash {line}", body, body_lineno, frame)

    @cell_magic("sh")
    def sh(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%sh: run the cell with sh."""
        self.script(f"sh {line}", body, body_lineno, frame)

    @cell_magic("python3")
    @cell_magic("python")
    def python3(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%python3: run the cell in a separate python3 process."""
        self.script(f"{sys.executable} {line}", body, body_lineno, frame)
