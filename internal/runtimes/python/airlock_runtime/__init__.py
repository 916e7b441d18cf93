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
    magics      IPython syntax: transform_cell, %magics, %%cell magics, !shell
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

Why not IPython's own InteractiveShell (Debian python3-ipython) for the
display and magics layers: measured through the real server, imported once
in the template and forked, it kept warm executions as they are but made a
session's first execution about 3.5 ms (30 %) slower and each idle session
about 1 MB (13 %) larger, added 15 Debian packages and 0.6 s to every
template start, and would still need airlock's own pieces around it
(frames on the wire, tracebacks without colours or runtime frames, no
network for %pip, no history database, no profile directory). IPython
stays the reference for behaviour: names, formats and magics follow it.
"""

from __future__ import annotations

from typing import Any

from . import current, display, magics, program, session, tracebacks, wire
from .display import format_display_data, publish_display_data
from .magics import transform_cell
from .session import main, serve
from .tracebacks import UsageError

__all__ = [
    "current", "display", "magics", "program", "session", "tracebacks", "wire",
    "format_display_data", "publish_display_data", "transform_cell", "main", "serve", "UsageError",
]


def __getattr__(name: str) -> Any:
    # airlock_runtime._session: the running session (None outside one), as
    # the single module had it.
    if name == "_session":
        return current.session
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
