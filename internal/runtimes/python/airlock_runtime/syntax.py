"""IPython's syntax in a cell: ``!cmd``, ``%magic``, ``%%cell magic``.

``transform_cell`` turns those lines into calls on the ``__airlock__``
builtin (a ``magics.Magics``), keeping line numbers, as IPython's
``core/inputtransformer2`` turns them into calls on ``get_ipython()``.
"""

from __future__ import annotations

import builtins
import re
from typing import Optional

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
