"""What every layer of the runtime shares: the running session (if any),
its standard streams, the runtime's own files, and small helpers that
never raise.
"""

from __future__ import annotations

import builtins
import io
import os
import sys

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc

#: The session serve() is running in this process, if any (set by
#: session.serve; display, magics and airlock_mpl reach it here).
session: Optional[Any] = None

#: The package's directory: frames of code in it are the runtime's own,
#: never shown in tracebacks nor interrupted (see is_runtime_file).
PACKAGE_DIR = os.path.dirname(__file__)
#: Where the package and airlock_mpl live: on sys.path during sessions.
RUNTIME_DIR = os.path.dirname(PACKAGE_DIR)
_PREFIX = PACKAGE_DIR + os.sep


def is_runtime_file(filename: str) -> bool:
    """Whether code compiled from filename is the runtime's own."""
    return filename.startswith(_PREFIX)


def warn(message: str) -> None:
    """Best-effort note on the user's stderr (never raises)."""
    try:
        print(message, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - stderr may be anything by now
        pass


def type_name(obj: Any) -> str:
    try:
        t = type(obj)
        return f"{t.__module__}.{t.__qualname__}"
    except BaseException:  # noqa: BLE001
        return "object"


def fallback_repr(obj: Any) -> str:
    try:
        return object.__repr__(obj)
    except BaseException:  # noqa: BLE001
        return "<unrepresentable object>"


def safe_str(obj: Any, limit: int = 2000) -> str:
    try:
        s = str(obj)
        if type(s) is not str:
            s = str.__str__(s)
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001
        s = f"<{type(obj).__name__} str() failed>"
    if len(s) > limit:
        s = s[:limit] + "..."
    return s


def text_stream(fd: int, mode: str = "w") -> io.TextIOWrapper:
    """A UTF-8 text stream on fd (line-buffered for output) that never closes fd."""
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(io.FileIO(fd, "r", closefd=False)),
                                encoding="utf-8", errors="backslashreplace")
    return io.TextIOWrapper(io.BufferedWriter(io.FileIO(fd, "w", closefd=False)),
                            encoding="utf-8", errors="backslashreplace", line_buffering=True)


def flush_stdio() -> None:
    """Flush Python-level stdout/stderr buffers (whatever objects they are now)."""
    running = session
    streams = [sys.stdout, sys.stderr]
    if running is not None:
        streams += [running.stdout, running.stderr]
    for s in streams:
        if s is None:
            continue
        try:
            s.flush()
        except KeyboardInterrupt:
            if running is not None and running.busy:
                raise  # user code is running: the interrupt is for it
        except BaseException:  # noqa: BLE001 - closed streams, closed fds, odd objects
            pass


def discard_buffered_output(streams: Iterable[Any], saved_fds: dict) -> None:
    """Empty the buffers of inherited streams without writing to fds 1/2.

    A zygote may have buffered output when it forked; it belongs to the
    template, not to this session.  Flush it into /dev/null.
    """
    if 1 not in saved_fds or 2 not in saved_fds:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        for s in streams:
            try:
                if s is not None:
                    s.flush()
            except Exception:  # noqa: BLE001 - closed or odd objects
                pass
    finally:
        os.dup2(saved_fds[1], 1)
        os.dup2(saved_fds[2], 2)
        os.close(null)


def is_closed(stream: Any) -> bool:
    try:
        return bool(stream.closed)
    except BaseException:  # noqa: BLE001
        return False



def reseed(stdlib: bool = True) -> None:
    """Give the process random state of its own, from the kernel, where it
    shares its memory with another: a template's child, a restored fork.

    The random module's global generator (``stdlib``; it reseeds itself on
    ``os.fork``, not on a restore) and numpy's global one, if imported:
    its whole MT19937 state (624 words, pos 624: the first draw
    regenerates it), more entropy than ``seed()``'s 128 bits and a third
    of what ``seed()`` writes into the process's pages (0.12 against
    0.35 MB). Generators user code made itself, and the hash seed, stay
    as they were. Never raises.
    """
    if stdlib:
        rnd = sys.modules.get("random")
        if rnd is not None:
            try:
                rnd.seed()
            except Exception:  # noqa: BLE001 - replaced by user code
                pass
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.set_state(("MT19937", np.frombuffer(os.urandom(2496), dtype=np.uint32), 624))
        except Exception:  # noqa: BLE001 - an older numpy, or replaced
            try:
                np.random.seed()
            except Exception:  # noqa: BLE001
                pass
