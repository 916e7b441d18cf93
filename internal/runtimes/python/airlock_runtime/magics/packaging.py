"""Packages (IPython's ``core/magics/packaging.py``): ``%pip`` (and
``%conda``, ``%mamba``), and ``pip install`` run through the shell.

``pip install`` asks the server for the packages (its index, its policy)
and installs what it fetched offline; other pip subcommands that need a
network explain that there is none.
"""

from __future__ import annotations

import builtins
import os
import re
import subprocess  # here, not lazily: an interrupt landing halfway through its import leaves threading broken for the session
import sys
import types
from typing import Any, Optional

from .. import current
from .magic import MagicFamily, line_magic

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc

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


def intercept(session: Any, cmd: str) -> bool:
    """Take over ``pip install`` run through the shell (``!pip install``);
    True if handled."""
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
        install(session, argv)
        return True
    _notice(argv)
    return True


def install(session: Any, argv: list[str]) -> None:
    """``pip install NAME ...``: the server downloads from its index
    (policy, limits and audit as for the API), this process installs
    offline into the session's site directory; raises PackageInstallError."""
    pkgs = _install_specs(argv)
    wheels = _ask_install(session, pkgs)
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


def _ask_install(sess: Any, pkgs: list[str]) -> str:
    """Send the install request; return where the server put the wheels."""
    import select
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


def _notice(argv: list[str]) -> None:
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


class PackagingMagics(MagicFamily):
    @line_magic("pip")
    @line_magic("conda", listed=False)
    @line_magic("mamba", listed=False)
    def pip(self, arg: str, frame: types.FrameType) -> None:
        """%pip install NAME: from the server's index; list, freeze and show
        work; the rest needs a network there is not."""
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
                _pip_list(freeze=(sub == "freeze"))
            return
        if sub == "show" and len(argv) > 1:
            for name in argv[1:]:
                if not name.startswith("-"):
                    version = _installed_version(name)
                    print(f"{name}: {version or 'not installed'}")
            return
        if sub == "install":
            install(self.session, argv)
            return
        _notice(argv)
