"""The shell and the filesystem (IPython's ``core/magics/osm.py``):
``!cmd`` and ``%system``, ``!!cmd`` and ``%sx``, ``%cd``, ``%pwd``,
``%env``, the shell aliases (``%ls``, ``%ll``, ``%cat``, ...) and
``%%writefile``."""

from __future__ import annotations

import builtins
import os
import re
import subprocess  # here, not lazily: an interrupt landing halfway through its import leaves threading broken for the session
import types
from typing import Any, Optional

from .. import current
from ..tracebacks import UsageError
from . import packaging
from .magic import MagicFamily, cell_magic, line_magic

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc

_IDENT = re.compile(r"[A-Za-z_]\w*")


def expand(cmd: str, frame: types.FrameType) -> str:
    """Expand ``{expr}`` and ``$name`` in a shell command, like IPython.

    ``{{``/``}}``/``$$`` are literal braces and dollar signs; ``$name`` of
    an undefined name is left for the shell.  If any ``{expr}`` fails, the
    command is used unchanged (so ``awk '{print $1}'`` works).
    """
    if "{" not in cmd and "$" not in cmd:
        return cmd
    g, loc = frame.f_globals, frame.f_locals
    out: list[str] = []
    i, n = 0, len(cmd)
    try:
        while i < n:
            c = cmd[i]
            if c == "{":
                if cmd.startswith("{{", i):
                    out.append("{")
                    i += 2
                    continue
                depth, j = 0, i
                while j < n:
                    if cmd[j] == "{":
                        depth += 1
                    elif cmd[j] == "}":
                        depth -= 1
                        if depth == 0:
                            break
                    j += 1
                if j >= n:
                    return cmd
                out.append(str(eval(cmd[i + 1:j], g, loc)))
                i = j + 1
            elif c == "}" and cmd.startswith("}}", i):
                out.append("}")
                i += 2
            elif c == "$":
                if cmd.startswith("$$", i):
                    out.append("$")
                    i += 2
                    continue
                m = _IDENT.match(cmd, i + 1)
                if m and (m.group() in loc or m.group() in g):
                    name = m.group()
                    out.append(str(loc[name] if name in loc else g[name]))
                    i = m.end()
                else:
                    out.append("$")
                    i += 1
            else:
                out.append(c)
                i += 1
    except KeyboardInterrupt:
        raise
    except Exception:  # noqa: BLE001 - IPython semantics: leave cmd unchanged
        return cmd
    return "".join(out)


class SList(list):
    """Output lines of ``!!cmd`` / ``x = !cmd`` (a list with IPython's helpers)."""

    @property
    def s(self) -> str:
        return " ".join(self)

    @property
    def n(self) -> str:
        return "\n".join(self)

    @property
    def l(self) -> list:  # noqa: E743 - IPython's name
        return list(self)

    spstr = s
    nlstr = n


def unquote(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        s = s[1:-1]
    return s


def _shell() -> str:
    sh = os.environ.get("SHELL", "")
    if sh and os.path.isabs(sh) and os.access(sh, os.X_OK):
        return sh
    return "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"


def system(frame: types.FrameType, cmd: str) -> None:
    """Run cmd through the shell with the session's stdio; sets ``_exit_code``."""
    current.flush_stdio()
    try:
        rc = subprocess.call(cmd, shell=True, executable=_shell())
    except KeyboardInterrupt:
        raise KeyboardInterrupt from None  # without subprocess's frames
    frame.f_globals["_exit_code"] = rc


def getoutput(frame: types.FrameType, cmd: str) -> SList:
    """Run cmd through the shell; its output (stdout and stderr) as lines."""
    current.flush_stdio()
    try:
        proc = subprocess.run(cmd, shell=True, executable=_shell(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except KeyboardInterrupt:
        raise KeyboardInterrupt from None
    frame.f_globals["_exit_code"] = proc.returncode
    return SList(proc.stdout.decode("utf-8", "replace").splitlines())


#: IPython's default aliases: %ls and friends run the command.
SHELL_ALIASES = {"ls": "ls", "ll": "ls -F -l", "cat": "cat", "cp": "cp", "mv": "mv",
                 "rm": "rm", "mkdir": "mkdir", "rmdir": "rmdir"}


class OSMagics(MagicFamily):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.oldpwd: Optional[str] = None

    @line_magic("system", listed=False)
    def system(self, arg: str, frame: types.FrameType) -> None:
        """``!cmd`` and ``%system cmd``: run through the shell; output goes
        straight to fds 1/2. ``pip install`` goes to the server."""
        cmd = expand(arg, frame)
        if packaging.intercept(self.session, cmd):
            return
        system(frame, cmd)

    @line_magic("sx", listed=False)
    def sx(self, arg: str, frame: types.FrameType) -> SList:
        """``!!cmd``, ``x = !cmd`` and ``%sx cmd``: run through the shell,
        return the output lines."""
        return getoutput(frame, expand(arg, frame))

    @line_magic("cd")
    def cd(self, arg: str, frame: types.FrameType) -> None:
        """%cd [DIR|-]: change the working directory (home without DIR)."""
        target = unquote(arg)
        if not target:
            target = os.path.expanduser("~")
        elif target == "-":
            if self.oldpwd is None:
                raise UsageError("%cd -: no previous directory")
            target = self.oldpwd
        target = os.path.expandvars(os.path.expanduser(target))
        old = os.getcwd()
        os.chdir(target)
        self.oldpwd = old
        print(os.getcwd())

    @line_magic("pwd")
    def pwd(self, arg: str, frame: types.FrameType) -> str:
        """%pwd: the working directory."""
        return os.getcwd()

    @line_magic("env")
    @line_magic("set_env", listed=False)
    def env(self, arg: str, frame: types.FrameType) -> Any:
        """%env: all variables; %env K: one; %env K=V or %env K V: set."""
        arg = arg.strip()
        if not arg:
            return dict(os.environ)
        if "=" in arg:
            key, _, value = arg.partition("=")
        elif " " in arg:
            key, _, value = arg.partition(" ")
        else:
            if arg not in os.environ:
                raise UsageError(f"Environment does not have key: {arg}")
            return os.environ[arg]
        key, value = key.strip(), unquote(value)
        os.environ[key] = value
        print(f"env: {key}={value}")
        return None

    @cell_magic("writefile")
    @cell_magic("file", listed=False)
    def writefile(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%writefile [-a] FILE: write (or append) the cell body to FILE."""
        words = line.split(None, 1)
        append = bool(words) and words[0] in ("-a", "--append")
        path = unquote(words[1] if append and len(words) > 1 else ("" if append else line))
        if not path:
            raise UsageError("%%writefile needs a file name")
        path = os.path.expanduser(expand(path, frame))
        exists = os.path.exists(path)
        print(("Appending to " if append else "Overwriting " if exists else "Writing ") + path)
        with open(path, "a" if append else "w", encoding="utf-8") as f:
            f.write(body)


def _alias(name: str, cmd: str) -> None:
    def run(self: OSMagics, arg: str, frame: types.FrameType) -> None:
        system(frame, expand(f"{cmd} {arg}".strip(), frame))
    run.__doc__ = f"%{name}: runs `{cmd}`."
    setattr(OSMagics, "alias_" + name, line_magic(name)(run))


for _name, _cmd in SHELL_ALIASES.items():
    _alias(_name, _cmd)
del _name, _cmd
