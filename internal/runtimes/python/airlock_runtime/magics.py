"""IPython's syntax and magics: ``!cmd``, ``%magic``, ``%%cell magic``.

``transform_cell`` turns those lines into calls on the ``__airlock__``
builtin (a ``Magics``), keeping line numbers; the magics themselves
follow IPython's (``%cd``, ``%env``, ``%time``, ``%timeit``, ``%who``,
``%run``, ``%%capture``, ``%%writefile``, ``%%bash``, ...), and ``pip
install`` asks the server for the packages (its index, its policy) and
installs what it fetched offline; other pip subcommands that need a
network explain that there is none.
"""

from __future__ import annotations

import ast
import builtins
import io
import os
import re
import subprocess  # here, not lazily: an interrupt landing halfway through its import leaves threading broken for the session
import sys
import types
from typing import Any, Callable, Optional

from . import current
from .display import HTML, SVG, Latex, Markdown, display, publish_display_data
from .tracebacks import UsageError

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc


# Cheap test for cells that may contain magic syntax (most cells don't).
MAGIC_HINT = re.compile(
    r"^[ \t]*(?:[!%]|(?:cd|pip3?|conda)[ \t]|[\w.,\[\] \t]+?=[ \t]*[!%])", re.M)
_ASSIGN_MAGIC = re.compile(r"(?P<target>[A-Za-z_][\w.,\[\]' \t]*?)[ \t]*=[ \t]*(?P<kind>!!?|%)(?P<rest>.*)$", re.S)
_LINE_MAGIC = re.compile(r"%(?P<name>\w+)[ \t]*(?P<arg>.*)$", re.S)
_AUTOMAGIC = re.compile(
    r"(?P<name>cd)(?:[ \t]+(?P<arg>\.{1,2}(?:/[^\n]*)?|/[^\s/=][^\n]*|-|[\w~$\"'][^\n]*))?[ \t]*$"
    r"|(?P<pname>pip3?|conda)[ \t]+(?P<parg>(?:install|uninstall|list|freeze|show|download)\b[^\n]*)$")


class _LineScanner:
    """Tracks, line by line, whether the next line starts a new statement.

    A tiny tokenizer: strings (including triple-quoted ones), comments,
    brackets and backslash continuations.  Magic syntax is only recognized
    at the start of a statement, never inside a string or an expression.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.quote: Optional[str] = None
        self.continued = False

    @property
    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.continued

    def feed(self, line: str) -> None:
        self.continued = False
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if self.quote is not None:
                if c == "\\":
                    i += 2
                elif line.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = None
                else:
                    i += 1
                continue
            if c == "#":
                break
            if c in "'\"":
                self.quote = line[i:i + 3] if line[i:i + 3] in ('"""', "'''") else c
                i += len(self.quote)
                continue
            if c in "([{":
                self.depth += 1
            elif c in ")]}":
                self.depth = max(0, self.depth - 1)
            elif c == "\\" and not line[i + 1:].strip():
                self.continued = True
                break
            i += 1
        if self.quote in ("'", '"'):
            # A one-quote string only goes on after an escaped newline.
            if not line.rstrip("\r\n").endswith("\\") or line == line.rstrip("\r\n"):
                self.quote = None


def _magic_call(indent: str, body: str) -> Optional[str]:
    """Python for one magic line (without indentation), or None."""
    if body.startswith("!!"):
        return f"{indent}__airlock__.getoutput({body[2:].strip()!r})"
    if body.startswith("!"):
        return f"{indent}__airlock__.system({body[1:].strip()!r})"
    if body.startswith("%%"):
        return None  # cell magics only on the first line
    m = _LINE_MAGIC.match(body)
    if m:
        return f"{indent}__airlock__.line_magic({m['name']!r}, {m['arg'].strip()!r})"
    m = _ASSIGN_MAGIC.match(body)
    if m:
        rest = m["rest"].strip()
        if m["kind"] == "%":
            lm = _LINE_MAGIC.match("%" + rest)
            if not lm:
                return None
            call = f"__airlock__.line_magic({lm['name']!r}, {lm['arg'].strip()!r})"
        else:
            call = f"__airlock__.getoutput({rest!r})"
        return f"{indent}{m['target'].strip()} = {call}"
    m = _AUTOMAGIC.match(body)
    if m:
        if m["name"]:
            return f"{indent}__airlock__.line_magic('cd', {(m['arg'] or '').strip()!r})"
        return f"{indent}__airlock__.line_magic('pip', {m['parg'].strip()!r})"
    return None


def transform_cell(code: str) -> tuple[str, set[int]]:
    """Turn IPython-style syntax into Python; return (source, magic line numbers).

    * ``!cmd`` runs cmd through the shell; ``!!cmd`` and ``x = !cmd`` return
      its output as a list of lines; ``{expr}`` and ``$name`` in cmd are
      expanded from the namespace;
    * ``%name args`` (and ``x = %name args``) call a line magic;
    * a first line ``%%name args`` makes the whole cell a cell magic;
    * ``cd DIR`` and ``pip install ...`` work without the ``%``.

    Line numbers are preserved, so tracebacks point at the original lines.
    """
    lines = code.splitlines(keepends=True)
    first = 0
    while first < len(lines) and not lines[first].strip():
        first += 1
    if first < len(lines) and lines[first].startswith("%%"):
        head = lines[first].strip()[2:]
        name, _, arg = head.partition(" ")
        if re.fullmatch(r"\w+", name):
            body = "".join(lines[first + 1:])
            call = f"__airlock__.cell_magic({name!r}, {arg.strip()!r}, {body!r}, {first + 2})\n"
            return "\n" * first + call, {first + 1}
    out = []
    magic: set[int] = set()
    scanner = _LineScanner()
    for lineno, line in enumerate(lines, 1):
        if scanner.at_statement_start:
            stripped = line.lstrip(" \t")
            content = stripped.rstrip("\r\n")
            if content and (content[0] in "!%" or MAGIC_HINT.match(line)):
                call = _magic_call(line[:len(line) - len(stripped)], content)
                if call is not None:
                    out.append(call + line[len(line.rstrip("\r\n")):])
                    magic.add(lineno)
                    continue
        scanner.feed(line)
        out.append(line)
    return ("".join(out), magic) if magic else (code, magic)


_IDENT = re.compile(r"[A-Za-z_]\w*")


def _expand(cmd: str, frame: types.FrameType) -> str:
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


def _format_time(seconds: float, precision: int = 3) -> str:
    """Like IPython's _format_time: '1.23 ms', '4.5 µs', '1min 3s'."""
    if seconds >= 60.0:
        parts, value = [], seconds
        for suffix, length in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
            amount = int(value // length)
            if amount:
                value -= amount * length
                parts.append(f"{amount}{suffix}")
        return " ".join(parts)
    units, scaling = ["s", "ms", "\u00b5s", "ns"], [1, 1e3, 1e6, 1e9]
    if seconds > 0.0:
        import math
        order = min(-int(math.floor(math.log10(seconds)) // 3), 3)
    else:
        order = 3
    return "%.*g %s" % (precision, seconds * scaling[order], units[order])


def _unquote(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        s = s[1:-1]
    return s


def _shell() -> str:
    sh = os.environ.get("SHELL", "")
    if sh and os.path.isabs(sh) and os.access(sh, os.X_OK):
        return sh
    return "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"


_PIP_NOTICE = """\
airlock: this pip command cannot run here: the sandbox has no network access (PyPI is unreachable).
airlock: `%pip install NAME` installs from the server's package index, if its operator configured one;
airlock: the usual scientific stack (numpy, pandas, matplotlib, scikit-learn, scipy, ...) comes
airlock: preinstalled from Debian. Run `%pip list` to see every installed package."""

_PIP_VALUE_OPTIONS = frozenset({
    "-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--src", "--python",
    "--platform", "--python-version", "--implementation", "--abi", "--progress-bar",
    "--cache-dir", "--log", "--proxy", "--retries", "--timeout", "--exists-action",
    "--trusted-host", "--cert", "--client-cert", "--report", "-e", "--editable",
})


class PackageInstallError(Exception):
    """``%pip install`` failed: not configured, not allowed, not found ..."""


PackageInstallError.__module__ = "builtins"  # tracebacks name it plainly, not the runtime's module


#: pip install options that only change how pip talks or what it reuses:
#: dropped (the server's download decides the rest).
_PIP_IGNORED = frozenset({"-q", "--quiet", "-v", "--verbose", "-U", "--upgrade", "--user",
                          "--no-cache-dir", "--disable-pip-version-check", "--no-input",
                          "--no-warn-script-location", "--break-system-packages",
                          "--only-binary=:all:", "--prefer-binary", "-qq", "-qqq"})


def _install_specs(argv: list[str]) -> list[str]:
    """The requirements of a ``pip install`` command line (after the
    program): plain specs only; an option that points pip elsewhere (an
    index, a file, a directory) is refused, since the server's index is
    the only source."""
    specs, seen_sub = [], False
    for a in argv:
        if not seen_sub and not a.startswith("-"):
            seen_sub = True  # "install"
            continue
        if a.startswith("-"):
            if a in _PIP_IGNORED:
                continue
            raise PackageInstallError(f"pip install option {a} is not supported here: "
                                      "packages come from the server's index only")
        specs.append(a)
    if not specs:
        raise PackageInstallError("pip install: name at least one package")
    return specs


def _installed_version(name: str) -> Optional[str]:
    """Installed version of distribution (or importable module) name, or None."""
    import importlib.metadata
    import importlib.util
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        if importlib.util.find_spec(name.replace("-", "_")) is not None:
            return "importable"
    except (ImportError, ValueError):
        pass
    return None


class Magics:
    """The ``__airlock__`` builtin: what transformed magic lines call."""

    def __init__(self, session: Any) -> None:  # a session.Session
        self.session = session
        self.oldpwd: Optional[str] = None

    # -- entry points called by transformed code --

    def system(self, cmd: str) -> None:
        """``!cmd``: run through the shell; output goes straight to fds 1/2."""
        frame = sys._getframe(1)
        cmd = _expand(cmd, frame)
        if self._pip_shell(cmd):
            return
        self.system_in(frame, cmd, expand=False)

    def getoutput(self, cmd: str) -> SList:
        """``!!cmd`` / ``x = !cmd``: run through the shell, return output lines."""
        frame = sys._getframe(1)
        cmd = _expand(cmd, frame)
        return self._output(frame, cmd)

    @staticmethod
    def _output(frame: types.FrameType, cmd: str) -> SList:
        current.flush_stdio()
        try:
            proc = subprocess.run(cmd, shell=True, executable=_shell(),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except KeyboardInterrupt:
            raise KeyboardInterrupt from None
        frame.f_globals["_exit_code"] = proc.returncode
        return SList(proc.stdout.decode("utf-8", "replace").splitlines())

    def line_magic(self, name: str, arg: str) -> Any:
        frame = sys._getframe(1)
        name = self._LINE_ALIASES.get(name, name)
        if name in self._SHELL_ALIASES:
            return self.system_in(frame, f"{self._SHELL_ALIASES[name]} {arg}".strip())
        method = getattr(self, "lmagic_" + name, None)
        if method is None:
            hint = ("" if ("cmagic_" + name) not in dir(self)
                    else f" (`%%{name}` is a cell magic: put it on the first line of the cell)")
            raise UsageError(f"Line magic function `%{name}` not found{hint}. "
                             f"Available: {self._available('lmagic_', '%')}.")
        return method(arg, frame)

    def cell_magic(self, name: str, line: str, body: str, body_lineno: int) -> Any:
        frame = sys._getframe(1)
        name = self._CELL_ALIASES.get(name, name)
        method = getattr(self, "cmagic_" + name, None)
        if method is None:
            raise UsageError(f"Cell magic `%%{name}` not found. "
                             f"Available: {self._available('cmagic_', '%%')}.")
        return method(line, body, body_lineno, frame)

    # -- helpers --

    _LINE_ALIASES = {"set_env": "env", "sx": "getoutput_", "system": "system_", "conda": "pip",
                     "mamba": "pip", "reload_ext": "load_ext", "unload_ext": "load_ext",
                     "aimport": "autoreload"}
    _CELL_ALIASES = {"file": "writefile", "HTML": "html", "md": "markdown", "js": "javascript"}
    _SHELL_ALIASES = {"ls": "ls", "ll": "ls -F -l", "cat": "cat", "cp": "cp", "mv": "mv",
                      "rm": "rm", "mkdir": "mkdir", "rmdir": "rmdir"}

    def _available(self, prefix: str, sigil: str) -> str:
        names = sorted(n[len(prefix):] for n in dir(self) if n.startswith(prefix)
                       and not n.endswith("_"))
        if prefix == "lmagic_":
            names = sorted(names + list(self._SHELL_ALIASES))
        return ", ".join(sigil + n for n in names)

    def system_in(self, frame: types.FrameType, cmd: str, expand: bool = True) -> None:
        """Run cmd through the shell with the session's stdio; sets ``_exit_code``."""
        if expand:
            cmd = _expand(cmd, frame)
        current.flush_stdio()
        try:
            rc = subprocess.call(cmd, shell=True, executable=_shell())
        except KeyboardInterrupt:
            raise KeyboardInterrupt from None  # without subprocess's frames
        frame.f_globals["_exit_code"] = rc

    def lmagic_system_(self, arg: str, frame: types.FrameType) -> None:
        self.system_in(frame, arg)

    def lmagic_getoutput_(self, arg: str, frame: types.FrameType) -> SList:
        return self._output(frame, _expand(arg, frame))

    # -- pip --

    def _pip_shell(self, cmd: str) -> bool:
        """Intercept ``pip install`` run through the shell; True if handled."""
        import shlex
        try:
            argv = shlex.split(cmd)
        except ValueError:
            return False
        if not argv:
            return False
        prog = os.path.basename(argv[0])
        if re.fullmatch(r"python[\d.]*", prog) and argv[1:3] == ["-m", "pip"]:
            argv = argv[3:]
        elif re.fullmatch(r"pip[\d.]*|conda|mamba", prog):
            argv = argv[1:]
        else:
            return False
        sub = next((a for a in argv if not a.startswith("-")), None)
        if sub not in ("install", "download", "wheel", "uninstall"):
            return False
        if sub == "install" and not re.fullmatch(r"conda|mamba", prog):
            self.pip_install(argv)
            return True
        self._pip_notice(argv)
        return True

    def pip_install(self, argv: list[str]) -> None:
        """``pip install NAME ...``: the server downloads from its index
        (policy, limits and audit as for the API), this process installs
        offline into the session's site directory; raises PackageInstallError."""
        pkgs = _install_specs(argv)
        wheels = self._ask_install(pkgs)
        site = os.path.join(os.path.dirname(wheels), "site")
        current.flush_stdio()
        env = dict(os.environ, PIP_CONFIG_FILE="/dev/null")
        try:
            rc = subprocess.call([sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
                                  "--no-input", "--no-index", "--find-links", wheels, "--target", site,
                                  "--upgrade", "--no-warn-script-location", *pkgs], env=env)
        finally:
            import shutil
            shutil.rmtree(wheels, ignore_errors=True)
        if site not in sys.path:
            sys.path.insert(0, site)
        pp = os.environ.get("PYTHONPATH", "")
        if site not in pp.split(":"):
            os.environ["PYTHONPATH"] = site + (":" + pp if pp else "")
        import importlib
        importlib.invalidate_caches()
        if rc != 0:
            raise PackageInstallError(f"pip install {' '.join(pkgs)} failed (exit status {rc})")

    def _ask_install(self, pkgs: list[str]) -> str:
        """Send the install request; return where the server put the wheels."""
        import select
        sess = self.session
        exec_id = getattr(sess, "exec_id", None)
        if exec_id is None or getattr(sess, "chan", None) is None:
            raise PackageInstallError("package installation is only possible in a session's cell")
        sess.send({"type": "install", "id": exec_id, "manager": "pip", "packages": pkgs})
        while True:
            # Wait in slices, so that an interrupt (the execution's
            # timeout) ends the wait; a reply arriving after it is dropped.
            r, _, _ = select.select([sess.chan.fd], [], [], 0.2) if not sess.chan._buf else ([1], [], [])
            sess.checkpoint()
            if not r:
                continue
            msg = sess.chan.recv()
            if msg is None:
                os._exit(0)  # the server is gone
            if msg.get("type") == "installed" and msg.get("id") == exec_id:
                break
        if msg.get("error"):
            raise PackageInstallError(str(msg["error"]))
        wheels = msg.get("wheels")
        if type(wheels) is not str or not os.path.isabs(wheels):
            raise PackageInstallError("the server's reply names no package directory")
        return wheels

    def _pip_notice(self, argv: list[str]) -> None:
        lines = [_PIP_NOTICE]
        names, skip, seen_sub = [], False, False
        for a in argv:
            if skip:
                skip = False
            elif a in _PIP_VALUE_OPTIONS:
                skip = True
            elif a.startswith("-"):
                continue
            elif not seen_sub:
                seen_sub = True
            else:
                m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", a)
                if m:
                    names.append(m.group())
        for name in names:
            version = _installed_version(name)
            state = f"already installed ({version})" if version else "NOT installed and cannot be installed"
            lines.append(f"airlock:   {name}: {state}")
        current.flush_stdio()
        print("\n".join(lines), file=sys.stderr)

    def lmagic_pip(self, arg: str, frame: types.FrameType) -> None:
        """%pip: installing is impossible (no network); list/freeze work."""
        import shlex
        try:
            argv = shlex.split(arg)
        except ValueError:
            argv = arg.split()
        sub = next((a for a in argv if not a.startswith("-")), None)
        if sub in ("list", "freeze"):
            import importlib.util
            if importlib.util.find_spec("pip") is not None:
                current.flush_stdio()
                subprocess.call([sys.executable, "-m", "pip", *argv])
            else:
                self._pip_list(freeze=(sub == "freeze"))
            return
        if sub == "show" and len(argv) > 1:
            for name in argv[1:]:
                if not name.startswith("-"):
                    version = _installed_version(name)
                    print(f"{name}: {version or 'not installed'}")
            return
        if sub == "install":
            self.pip_install(argv)
            return
        self._pip_notice(argv)

    @staticmethod
    def _pip_list(freeze: bool) -> None:
        import importlib.metadata
        dists = {}
        for d in importlib.metadata.distributions():
            name = d.metadata["Name"]
            if name:
                dists.setdefault(name, d.version)
        items = sorted(dists.items(), key=lambda kv: kv[0].lower())
        if freeze:
            print("\n".join(f"{n}=={v}" for n, v in items))
            return
        width = max([len("Package")] + [len(n) for n, _ in items])
        vwidth = max([len("Version")] + [len(v or "") for _, v in items])
        rows = [f"{'Package':<{width}} {'Version':<{vwidth}}", f"{'-' * width} {'-' * vwidth}"]
        rows += [f"{n:<{width}} {v}" for n, v in items]
        print("\n".join(rows))

    # -- line magics --

    def lmagic_cd(self, arg: str, frame: types.FrameType) -> None:
        """%cd [DIR|-]: change the working directory (home without DIR)."""
        target = _unquote(arg)
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

    def lmagic_pwd(self, arg: str, frame: types.FrameType) -> str:
        """%pwd: the working directory."""
        return os.getcwd()

    def lmagic_env(self, arg: str, frame: types.FrameType) -> Any:
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
        key, value = key.strip(), _unquote(value)
        os.environ[key] = value
        print(f"env: {key}={value}")
        return None

    def lmagic_time(self, arg: str, frame: types.FrameType) -> Any:
        """%time STATEMENT: run it once and print CPU and wall times."""
        if not arg.strip():
            raise UsageError("%time needs a statement")
        tree = compile(arg, "<timed exec>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr):
            code = compile(ast.Expression(tree.body[0].value), "<timed eval>", "eval", dont_inherit=True)
        else:
            code = compile(tree, "<timed exec>", "exec", dont_inherit=True)
        return self._timed(lambda: eval(code, frame.f_globals, frame.f_locals))

    @staticmethod
    def _timed(fn: Callable[[], Any]) -> Any:
        import time
        t0, c0 = time.perf_counter(), os.times()
        try:
            return fn()
        finally:
            c1, wall = os.times(), time.perf_counter() - t0
            user, sys_ = c1.user - c0.user, c1.system - c0.system
            print(f"CPU times: user {_format_time(user)}, sys: {_format_time(sys_)}, "
                  f"total: {_format_time(user + sys_)}\nWall time: {_format_time(wall)}")

    def lmagic_timeit(self, arg: str, frame: types.FrameType) -> Any:
        """%timeit [-n N] [-r R] [-q] [-o] STATEMENT: time a statement (short)."""
        return self._timeit(arg, "pass", frame)

    def _timeit(self, arg: str, setup: str, frame: types.FrameType, stmt: Optional[str] = None) -> Any:
        import timeit
        number, repeat, quiet, ret = None, None, False, False
        words = arg.split(" ")
        i = 0
        while i < len(words):
            w = words[i]
            if w in ("-n", "-r") and i + 1 < len(words):
                if w == "-n":
                    number = int(words[i + 1])
                else:
                    repeat = int(words[i + 1])
                i += 2
            elif w == "-q":
                quiet, i = True, i + 1
            elif w == "-o":
                ret, i = True, i + 1
            elif w == "":
                i += 1
            else:
                break
        rest = " ".join(words[i:])
        if stmt is None:
            stmt = rest
        elif rest.strip():
            setup = rest
        if not stmt.strip():
            raise UsageError("%timeit needs a statement")
        ns = dict(frame.f_globals)
        ns.update(frame.f_locals)
        timer = timeit.Timer(stmt, setup, globals=ns)
        times: list[float] = []
        if number is None:
            number = 1
            while True:
                t = timer.timeit(number)
                if t >= 0.1 or number >= 10 ** 9:
                    break
                number *= 10
            times.append(t / number)
        # Without -n the whole measurement stays around a second.
        budget = 1.0 if times else None
        target = repeat or 7
        spent = sum(times) * number
        while len(times) < target and (budget is None or spent < budget or repeat):
            t = timer.timeit(number)
            spent += t
            times.append(t / number)
        mean = sum(times) / len(times)
        std = (sum((t - mean) ** 2 for t in times) / len(times)) ** 0.5
        if not quiet:
            runs = len(times)
            print(f"{_format_time(mean)} \u00b1 {_format_time(std)} per loop (mean \u00b1 std. dev. "
                  f"of {runs} run{'s' if runs != 1 else ''}, {number:,} loop{'s' if number != 1 else ''} each)")
        if ret:
            return types.SimpleNamespace(average=mean, stdev=std, loops=number, repeat=len(times),
                                         all_runs=[t * number for t in times],
                                         best=min(times), worst=max(times))
        return None

    def lmagic_who(self, arg: str, frame: types.FrameType) -> None:
        """%who: names of the user's variables."""
        names = self._user_names()
        print("\t".join(names) if names else "Interactive namespace is empty.")

    def lmagic_whos(self, arg: str, frame: types.FrameType) -> None:
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

    def lmagic_reset(self, arg: str, frame: types.FrameType) -> None:
        """%reset [-f]: delete all user variables (never asks)."""
        self.session.reset_namespace()

    def lmagic_run(self, arg: str, frame: types.FrameType) -> None:
        """%run [-i] SCRIPT [ARGS]: run a file as __main__; its globals are kept."""
        import shlex
        argv = shlex.split(arg)
        interactive = bool(argv) and argv[0] == "-i"
        if interactive:
            argv = argv[1:]
        if not argv:
            raise UsageError("%run needs a file name")
        path = os.path.expanduser(argv[0])
        if not os.path.exists(path) and os.path.exists(path + ".py"):
            path += ".py"
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
        session = self.session
        if interactive:
            g = session.ns
            module = None
        else:
            module = types.ModuleType("__main__")
            g = module.__dict__
            g.update({"__file__": path, "__builtins__": builtins})
        saved_argv, saved_main = sys.argv, sys.modules.get("__main__")
        sys.argv = [path] + argv[1:]
        if module is not None:
            sys.modules["__main__"] = module
        try:
            exec(code, g)
        finally:
            sys.argv = saved_argv
            if module is not None:
                sys.modules["__main__"] = saved_main
                for k, v in g.items():
                    if k not in ("__name__", "__file__", "__builtins__", "__doc__",
                                 "__loader__", "__spec__", "__package__"):
                        session.ns[k] = v

    def lmagic_lsmagic(self, arg: str, frame: types.FrameType) -> None:
        """%lsmagic: list the supported magics."""
        print("Line magics: " + self._available("lmagic_", "%"))
        print("Cell magics: " + self._available("cmagic_", "%%"))
        print("Shell: !cmd, !!cmd, x = !cmd ({expr} and $name are expanded)")

    def lmagic_matplotlib(self, arg: str, frame: types.FrameType) -> None:
        """%matplotlib [inline]: figures are always shown inline; accepted."""
        if arg.strip() not in ("", "inline"):
            current.warn(f"airlock: %matplotlib {arg.strip()} is not available; figures are shown inline")

    def lmagic_config(self, arg: str, frame: types.FrameType) -> None:
        """%config: IPython configuration does not apply; accepted and ignored."""

    def lmagic_xmode(self, arg: str, frame: types.FrameType) -> None:
        """%xmode: accepted and ignored."""

    def lmagic_load_ext(self, arg: str, frame: types.FrameType) -> None:
        """%load_ext: IPython extensions are not available; ignored with a note."""
        current.warn(f"airlock: IPython extensions are not supported; ignored: {arg.strip()}")

    def lmagic_autoreload(self, arg: str, frame: types.FrameType) -> None:
        """%autoreload: not supported; ignored (use importlib.reload)."""

    # -- cell magics --

    def cmagic_time(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> Any:
        """%%time: run the cell and print its CPU and wall times."""
        return self._timed(lambda: self.session.run_nested(body, body_lineno))

    def cmagic_timeit(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> Any:
        """%%timeit [options] [SETUP]: time the cell body."""
        return self._timeit(line, "pass", frame, stmt=body)

    def cmagic_capture(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%capture [--no-stdout] [--no-stderr] [--no-display] [VAR]: capture Python-level output."""
        words = line.split()
        var = next((w for w in words if not w.startswith("-")), None)
        out, err = io.StringIO(), io.StringIO()
        outputs: list = []
        saved = sys.stdout, sys.stderr
        if "--no-stdout" not in words:
            sys.stdout = out
        if "--no-stderr" not in words:
            sys.stderr = err
        session = self.session
        capturing = "--no-display" not in words
        if capturing:
            session.captures.append(outputs)
        try:
            session.run_nested(body, body_lineno)
        finally:
            if capturing:
                session.captures.pop()
            sys.stdout, sys.stderr = saved
        if var:
            frame.f_globals[var] = CapturedIO(out.getvalue(), err.getvalue(), outputs)

    def cmagic_writefile(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%writefile [-a] FILE: write (or append) the cell body to FILE."""
        words = line.split(None, 1)
        append = bool(words) and words[0] in ("-a", "--append")
        path = _unquote(words[1] if append and len(words) > 1 else ("" if append else line))
        if not path:
            raise UsageError("%%writefile needs a file name")
        path = os.path.expanduser(_expand(path, frame))
        exists = os.path.exists(path)
        print(("Appending to " if append else "Overwriting " if exists else "Writing ") + path)
        with open(path, "a" if append else "w", encoding="utf-8") as f:
            f.write(body)

    def cmagic_script(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
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

    def cmagic_bash(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%bash: run the cell with bash."""
        self.cmagic_script(f"bash {line}", body, body_lineno, frame)

    def cmagic_sh(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%sh: run the cell with sh."""
        self.cmagic_script(f"sh {line}", body, body_lineno, frame)

    def cmagic_python3(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%python3: run the cell in a separate python3 process."""
        self.cmagic_script(f"{sys.executable} {line}", body, body_lineno, frame)

    cmagic_python = cmagic_python3

    def cmagic_html(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%html: display the cell as HTML."""
        display(HTML(body))

    def cmagic_markdown(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%markdown: display the cell as Markdown."""
        display(Markdown(body))

    def cmagic_latex(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%latex: display the cell as LaTeX."""
        display(Latex(body))

    def cmagic_svg(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%svg: display the cell as SVG."""
        display(SVG(body))

    def cmagic_javascript(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%javascript: not available (airlock has no browser to run it)."""
        raise UsageError("%%javascript is not supported: there is no browser to run it")


class CapturedIO:
    """What ``%%capture VAR`` stores: .stdout, .stderr, .outputs and .show()."""

    def __init__(self, stdout: str, stderr: str, outputs: list) -> None:
        self.stdout, self.stderr, self.outputs = stdout, stderr, outputs

    def show(self) -> None:
        sys.stdout.write(self.stdout)
        sys.stderr.write(self.stderr)
        for data, md in self.outputs:
            publish_display_data(data, md)

    __call__ = show

    def __repr__(self) -> str:
        return "<airlock CapturedIO>"

