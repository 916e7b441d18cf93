"""What executions, commands and files return, as plain objects built
from the API's JSON (each keeps it in ``raw``)."""

import base64
import json

# Result attributes and the MIME types they read; png, jpeg and pdf are
# decoded to bytes.
_MIMES = {
    "text": "text/plain",
    "html": "text/html",
    "markdown": "text/markdown",
    "svg": "image/svg+xml",
    "png": "image/png",
    "jpeg": "image/jpeg",
    "pdf": "application/pdf",
    "latex": "text/latex",
    "json": "application/json",
    "javascript": "application/javascript",
}
_BINARY = ("png", "jpeg", "pdf")


class Result:
    """One rich output of an execution: the value of the last expression
    (``is_main_result``) or something displayed (a plot, a table).

    ``text``, ``html``, ``markdown``, ``svg``, ``latex``, ``javascript`` are
    str, ``png``, ``jpeg``, ``pdf`` bytes, ``json`` the decoded value; each
    is None when absent. ``data`` is the whole MIME bundle as sent (images
    in base64).
    """

    def __init__(self, output):
        self.raw = output
        self.type = output.get("type", "result")
        self.data = output.get("data") or {}
        self.metadata = output.get("metadata") or {}
        self.is_main_result = self.type == "result"
        for attr, mime in _MIMES.items():
            v = self.data.get(mime)
            if v is not None and attr in _BINARY:
                v = base64.b64decode(v)
            setattr(self, attr, v)

    def formats(self):
        """The formats this result has, by attribute name ("text", "png", ...) and, for others, by MIME type."""
        known = {m: a for a, m in _MIMES.items()}
        return [known.get(m, m) for m in self.data]

    def __repr__(self):
        return "Result(%s)" % (self.text if self.text is not None else ", ".join(self.formats()))

    def __str__(self):
        return self.text or ""


class Logs:
    """What an execution printed: ``stdout`` and ``stderr`` as str. Past
    the session's ``max_output`` the rest is dropped (the code runs on):
    ``stdout_truncated`` is then True and ``stdout_dropped_bytes`` says
    how much was dropped (likewise for stderr)."""

    def __init__(self, stdout="", stderr="", stdout_truncated=False, stderr_truncated=False,
                 stdout_dropped_bytes=0, stderr_dropped_bytes=0):
        self.stdout = stdout
        self.stderr = stderr
        self.stdout_truncated = stdout_truncated
        self.stderr_truncated = stderr_truncated
        self.stdout_dropped_bytes = stdout_dropped_bytes
        self.stderr_dropped_bytes = stderr_dropped_bytes

    def __repr__(self):
        return "Logs(stdout=%r, stderr=%r)" % (self.stdout, self.stderr)


class ExecutionError:
    """An uncaught exception (or why an execution stopped): ``name``
    ("ZeroDivisionError"; a limit's "TimeoutError", "CPUTimeError",
    "MemoryError", "ProcessLimitError", whose value says what happened;
    "SessionPaused" when a shutdown's or a lifetime's pause interrupted it;
    "KeyboardInterrupt" after ``interrupt()``), ``value`` (its message),
    ``traceback`` (str, the user's code only) and ``traceback_lines``."""

    def __init__(self, e):
        self.raw = e
        self.name = e.get("name", "")
        self.value = e.get("value", "")
        self.traceback_lines = list(e.get("traceback") or [])
        self.traceback = "\n".join(self.traceback_lines)

    def __repr__(self):
        return "ExecutionError(%s: %s)" % (self.name, self.value)

    def __str__(self):
        return "%s: %s" % (self.name, self.value)


class FileChange:
    """A file an execution created, modified or deleted in /workspace."""

    def __init__(self, f):
        self.path = f.get("path", "")
        self.size = f.get("size", 0)
        self.change = f.get("change", "")

    def __repr__(self):
        return "FileChange(%s %s, %d bytes)" % (self.change, self.path, self.size)


class OutputFile:
    """A file a one-shot run created or modified: ``content`` is bytes
    (None when the server left it out, ``omitted``)."""

    def __init__(self, f):
        self.path = f.get("path", "")
        self.size = f.get("size", 0)
        self.omitted = bool(f.get("omitted"))
        b64 = f.get("content_base64")
        self.content = base64.b64decode(b64) if b64 is not None and not self.omitted else None

    @property
    def text(self):
        return None if self.content is None else self.content.decode("utf-8", "replace")

    def __repr__(self):
        return "OutputFile(%s, %d bytes)" % (self.path, self.size)


class Execution:
    """The outcome of one ``run_code``.

    ``results`` (Result, in order), ``logs`` (stdout, stderr), ``error``
    (ExecutionError or None), ``text`` (the main result's text), and the
    API's figures: ``execution_count``, ``duration_ms``, ``cpu_ms``,
    ``peak_memory_bytes``, ``killed``, ``kill_reason`` ("timeout",
    "memory", ...), ``session_ended``/``end_code``, ``files_changed``,
    ``redacted`` (matches the server's output policy replaced),
    ``flags`` (the operator's code rules that flagged the code) and
    ``tool_calls`` (dicts: the calls the code made to the session's tools,
    with airlock's decision: tool, decision, code, reason, field, rule,
    status, duration_ms).
    """

    def __init__(self, r):
        self.raw = r
        self.results = [Result(o) for o in r.get("results") or []]
        self.logs = Logs(r.get("stdout", ""), r.get("stderr", ""),
                         bool(r.get("stdout_truncated")), bool(r.get("stderr_truncated")),
                         r.get("stdout_dropped_bytes", 0), r.get("stderr_dropped_bytes", 0))
        self.error = ExecutionError(r["error"]) if r.get("error") else None
        self.exit_code = r.get("exit_code", 0)
        self.execution_count = r.get("execution_count", 0)
        self.duration_ms = r.get("duration_ms", 0)
        self.cpu_ms = r.get("cpu_ms", 0)
        self.peak_memory_bytes = r.get("peak_memory_bytes", 0)
        self.killed = bool(r.get("killed"))
        self.kill_reason = r.get("kill_reason", "")
        self.session_ended = bool(r.get("session_ended"))
        self.end_reason = r.get("end_reason", "")
        self.end_code = r.get("end_code", "")
        self.files_changed = [FileChange(f) for f in r.get("files_changed") or []]
        self.results_dropped = r.get("results_dropped", 0)
        self.redacted = r.get("redacted", 0)
        self.flags = list(r.get("flags") or [])
        self.tool_calls = list(r.get("tool_calls") or [])

    @property
    def text(self):
        """The main result's text (the value of the last expression), or None."""
        for res in self.results:
            if res.is_main_result:
                return res.text
        return None

    def to_json(self):
        return json.dumps(self.raw)

    def __repr__(self):
        return "Execution(results=%r, logs=%r, error=%r)" % (self.results, self.logs, self.error)


class RunResult(Execution):
    """A one-shot run's Execution plus ``files`` (OutputFile) and the ``limits`` that applied."""

    def __init__(self, r):
        super().__init__(r)
        self.files = [OutputFile(f) for f in r.get("files") or []]
        self.limits = r.get("limits") or {}

    def file(self, path):
        """The output file at path, or None."""
        for f in self.files:
            if f.path == path:
                return f
        return None


class CommandResult:
    """A shell command: running (``state`` "running") or how it ended:
    ``exit_code`` (None while it runs), ``stdout``, ``stderr`` (with
    ``*_truncated`` and ``*_dropped_bytes`` as in Logs),
    ``killed``/``kill_reason``, ``signal``, ``duration_ms``, ``redacted``
    and ``flags`` (as Execution's)."""

    def __init__(self, c):
        self.raw = c
        self.id = c.get("id", "")
        self.command = c.get("command", "")
        self.state = c.get("state", "")
        self.pid = c.get("pid", 0)
        self.exit_code = c.get("exit_code")
        self.stdout = c.get("stdout", "")
        self.stderr = c.get("stderr", "")
        self.stdout_truncated = bool(c.get("stdout_truncated"))
        self.stderr_truncated = bool(c.get("stderr_truncated"))
        self.stdout_dropped_bytes = c.get("stdout_dropped_bytes", 0)
        self.stderr_dropped_bytes = c.get("stderr_dropped_bytes", 0)
        self.duration_ms = c.get("duration_ms", 0)
        self.cpu_ms = c.get("cpu_ms", 0)
        self.killed = bool(c.get("killed"))
        self.kill_reason = c.get("kill_reason", "")
        self.signal = c.get("signal", "")
        self.redacted = c.get("redacted", 0)
        self.flags = list(c.get("flags") or [])
        pty = c.get("pty")
        self.pty = (pty["cols"], pty["rows"]) if pty else None  # (cols, rows) of its terminal
        self.background = bool(c.get("background"))

    @property
    def running(self):
        return self.state == "running"

    @property
    def error(self):
        """A short sentence when the command failed (non-zero exit, killed), else None."""
        if self.killed:
            return "killed (%s)" % (self.kill_reason or self.signal or "signal")
        if self.signal:
            return "ended by %s" % self.signal
        if self.exit_code:
            return "exit status %d" % self.exit_code
        return None

    def __repr__(self):
        return "CommandResult(exit_code=%r, stdout=%r, stderr=%r)" % (self.exit_code, self.stdout, self.stderr)


class CodeContext:
    """A code context of a sandbox: an interpreter (``language``) with its
    own state and working directory (``cwd``), sharing the sandbox's files
    and limits. ``id`` names it in ``run_code(context=...)``."""

    def __init__(self, c):
        self.raw = c
        self.id = c.get("id", "")
        self.language = c.get("language", "")
        self.cwd = c.get("cwd", "")
        self.default = bool(c.get("default"))
        self.state = c.get("state", "")
        self.executions = c.get("executions", 0)

    def __repr__(self):
        return "CodeContext(id=%r, language=%r, cwd=%r)" % (self.id, self.language, self.cwd)


class EntryInfo:
    """A file or directory in /workspace: ``name``, ``path`` (relative to
    /workspace), ``type`` (file, dir, symlink, other), ``size``, ``mode``,
    ``mtime`` (RFC 3339 str)."""

    def __init__(self, e):
        self.raw = e
        self.path = e.get("path", "")
        self.name = self.path.rsplit("/", 1)[-1]
        self.type = e.get("type", "")
        self.size = e.get("size", 0)
        self.mode = e.get("mode", "")
        self.mtime = e.get("mtime", "")

    @property
    def is_dir(self):
        return self.type == "dir"

    def __repr__(self):
        return "EntryInfo(%s, %s, %d bytes)" % (self.path, self.type, self.size)


class WriteInfo:
    """An uploaded file: ``path`` and ``size``."""

    def __init__(self, u):
        self.path = u.get("path", "")
        self.size = u.get("size", 0)

    def __repr__(self):
        return "WriteInfo(%s, %d bytes)" % (self.path, self.size)
