"""Tracebacks as IPython shows them: the runtime's frames hidden, cells as
``Cell In[N], line L``, no ANSI colours, huge ones cut in the middle.
"""

from __future__ import annotations

import builtins
import re
import traceback

from . import current
from .display import TEXT_LIMIT

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc


class UsageError(Exception):
    """Wrong use of a magic command (named like IPython's): shown without a traceback."""


# Cells are compiled with the file name "Cell In[N]" (IPython's wording).
_CELL_FILE = re.compile(r"Cell In\[(\d+)\]\Z")
_CELL_FRAME_LINE = re.compile(r'^(.*?)File "Cell In\[(\d+)\]", line (\d+)(?:, in (.*))?$')


def _clean_stack(te: traceback.TracebackException, magic_lines: dict, seen: set) -> None:
    """Hide the runtime's frames (and asyncio's before the first cell frame)."""
    if id(te) in seen:
        return
    seen.add(id(te))
    frames = list(te.stack)
    first = next((i for i, f in enumerate(frames) if _CELL_FILE.match(f.filename)), None)
    if first is not None:
        frames = frames[first:]
    kept = []
    for f in frames:
        if current.is_runtime_file(f.filename):
            continue
        if f.lineno in magic_lines.get(f.filename, ()):
            # The code ran the transformed line; its columns do not match the source line.
            f.colno = f.end_colno = None
        kept.append(f)
    te.stack = traceback.StackSummary.from_list(kept)
    for sub in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if sub is not None:
            _clean_stack(sub, magic_lines, seen)


def _cell_line(m: re.Match) -> str:
    prefix, n, line, func = m.groups()
    where = f", in {func}" if func and func != "<module>" else ""
    return f"{prefix}Cell In[{n}], line {line}{where}"


def format_exception(exc: BaseException, magic_lines: dict) -> tuple[str, str, list[str]]:
    """(name, value, traceback lines) of an exception, IPython style."""
    name = type(exc).__name__
    value = current.safe_str(exc, TEXT_LIMIT)
    if isinstance(exc, UsageError):
        return name, value, [f"UsageError: {value}"]  # no traceback, as in IPython
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
    _clean_stack(te, magic_lines, set())
    lines: list[str] = []
    total = 0
    for chunk in te.format():
        for line in chunk.rstrip("\n").split("\n"):
            m = _CELL_FRAME_LINE.match(line)
            if m:
                line = _cell_line(m)
            total += len(line)
            lines.append(line)
    if total > TEXT_LIMIT:
        # Keep the head and the tail (where the exception itself is).
        head, tail, size = [], [], 0
        for line in reversed(lines):
            if size + len(line) > TEXT_LIMIT // 2:
                break
            tail.append(line)
            size += len(line)
        for line in lines:
            if size + len(line) > TEXT_LIMIT:
                break
            head.append(line)
            size += len(line)
        lines = head + [f"... [traceback truncated: {total:,} characters in total]"] + tail[::-1]
    return name, value, lines

