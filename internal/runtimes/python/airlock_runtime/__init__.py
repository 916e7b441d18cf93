"""airlock's Python session runtime: the persistent interpreter of a session.

The server starts it inside the sandbox as::

    python3 -I -B /opt/airlock/python/airlock_runtime

(the package's ``__main__``), or the template interpreter (airlock_zygote)
imports the package once, with numpy, pandas and matplotlib, forks, and
calls :func:`main` in the child. The contract is docs/runtime-protocol.md:
fd 3 is the control socket (framed JSON), fds 1 and 2 are the execution's
stdout and stderr, SIGINT during an execution is ``KeyboardInterrupt``.

Layers, each importing only those below it (split as IPython's core is)::

    session     the state of a session and the protocol loop: serve, main
    program     program mode: run a file as ``python3 FILE`` would, then exit
    magics      what magic lines call: %magics, %%cell magics, !shell, by
                family as IPython's core/magics/
    syntax      IPython syntax (!cmd, %magic, %%cell) into calls on the
                magics: transform_cell
    compilerop  codeop's compiler: __future__ imports stay in force
    tracebacks  exceptions as IPython shows them, the runtime's frames hidden
    display     MIME bundles (format_display_data), display(), the classes of
                IPython.display, and a stand-in for IPython when it is absent
    current     what they share: the running session, its stdio, the
                runtime's own files, helpers that never raise
    wire        JSON and framing on C-level primitives

Every module resolves builtins through a private snapshot taken when it is
imported (``globals()["__builtins__"] = dict(vars(builtins))`` before any
def), so user code that patches builtins (print, len, isinstance, repr,
open, ...) cannot break the protocol loop; user code still sees, and may
patch, the real builtins module. Importing the package has no side
effects: everything per session happens in :func:`serve`. The one piece
of state is the running session, ``current.session``.

Why not IPython's own InteractiveShell (Debian python3-ipython 8.5) for the
display and magics layers: a prototype that created the shell once in the
template and ran every cell through ``run_cell`` (history off, IPython's
formatters, display publisher and displayhook sending airlock's frames) was
measured through the real server against this package, IPython installed
for both, on a shared 2-core machine (medians of 9 and 12 runs of
``airlock bench --only exec,create_pandas``; 40 idle sessions with numpy
and pandas imported)::

                                        hand-written   InteractiveShell
    warm `x = 1` over HTTP, p50         0.49 ms        0.49 ms
    create + first pandas cell, p50     10.2 ms        11.8 ms  (+1.1 to +3.6 ms per round)
      the same outside a sandbox: CPU   9.7-10.1 ms    11.8-13.3 ms (+18 % COW faults)
    PSS per idle session                7.0-7.7 MB     8.0 MB
    template RSS (shared)               69-75 MB       90-96 MB
    template start                                     +0.6 s (imports)

It keeps warm executions but not the first one, costs memory, needs 15
more Debian packages, and would still need airlock's own pieces around it
(frames on the wire, tracebacks without colours or runtime frames, %pip
through the server, no history database or profile directory), so the
layers stay hand-written, with IPython as the reference for behaviour:
names, formats and magics follow it.
"""

from __future__ import annotations

# importlib's own machinery, loaded at every interpreter's start: the
# importlib package (and the warnings module it imports) would cost a
# program run alone a few hundred microseconds more.
import _frozen_importlib

# The modules and names below load on first use (PEP 562): the standalone
# runtime compiles only what it runs (a program run: wire, current,
# session, program), and the template imports them all once (preload).
_MODULES = ("compilerop", "current", "display", "magics", "program", "session", "syntax", "tracebacks", "wire")
_NAMES = {
    "format_display_data": "display", "publish_display_data": "display", "transform_cell": "syntax",
    "main": "session", "serve": "session", "UsageError": "tracebacks",
}

__all__ = [*_MODULES, *_NAMES]


def _module(name: str) -> Any:
    """The submodule name, imported if it is not yet (as
    importlib.import_module does it: never through builtins.__import__,
    which user code may have replaced)."""
    return _frozen_importlib._gcd_import(__name__ + "." + name)


def preload() -> None:
    """Import every module now (the template, whose children share them)."""
    for name in _MODULES:
        _module(name)


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return _module(name)
    if name in _NAMES:
        return getattr(_module(_NAMES[name]), name)
    # airlock_runtime._session: the running session (None outside one), as
    # the single module had it.
    if name == "_session":
        return _module("current").session
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
