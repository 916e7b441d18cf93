"""A LangChain tool that runs Python in an airlock sandbox.

    from airlock import Sandbox
    from airlock.langchain import as_tool

    tool = as_tool(Sandbox.create())          # or as_tool(None): a sandbox made on first use
    llm.bind_tools([tool])

langchain_core is imported only when as_tool is called, so ``import
airlock`` (and this module) never needs it.
"""

import atexit
import base64
import re
import threading

DESCRIPTION = (
    "A Python shell. Use this to execute python code; state (variables, imports, files) persists "
    "between calls. Input should be valid python code. The value of the last expression is returned, "
    "print() to see other values. numpy, pandas and matplotlib are available; plots are returned as "
    "images. Always save files to /workspace."
)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# MAX_CHARS caps each part of what the model reads (stdout, stderr, result).
MAX_CHARS = 20000


def _cap(s):
    s = _ANSI.sub("", s).rstrip()
    if len(s) > MAX_CHARS:
        s = s[:MAX_CHARS] + "\n... (%d more characters)" % (len(s) - MAX_CHARS)
    return s


def format_execution(execution):
    """What a model reads of an Execution: stdout, stderr, the result's
    text, the traceback, the files written, and a note per image (the
    images themselves are the tool's artifact)."""
    parts = []
    if execution.logs.stdout:
        parts.append(_cap(execution.logs.stdout))
    if execution.logs.stdout_truncated:
        parts.append("(stdout truncated: %d bytes dropped past max_output)" % execution.logs.stdout_dropped_bytes)
    if execution.logs.stderr:
        parts.append("stderr:\n" + _cap(execution.logs.stderr))
    for r in execution.results:
        if r.png is not None or r.jpeg is not None or r.svg is not None:
            kind = "png" if r.png is not None else "jpeg" if r.jpeg is not None else "svg"
            parts.append("[image/%s returned to the user]" % kind)
        elif r.text is not None and r.is_main_result:
            parts.append(_cap(r.text))
        elif r.text is not None:
            parts.append("display: " + _cap(r.text))
    if execution.error is not None:
        e = execution.error
        parts.append(_cap(e.traceback) if e.traceback else "%s: %s" % (e.name, e.value))
    if execution.killed:
        parts.append("(stopped: %s)" % (execution.kill_reason or "killed"))
    if execution.session_ended:
        parts.append("(the sandbox ended: %s; its state is lost)" % (execution.end_reason or execution.end_code))
    changed = [f for f in execution.files_changed if f.change != "deleted"]
    if changed:
        parts.append("files written: " + ", ".join("/workspace/" + f.path for f in changed))
    return "\n".join(parts) if parts else "(no output)"


def _artifact(execution):
    images = []
    for r in execution.results:
        for attr, mime in (("png", "image/png"), ("jpeg", "image/jpeg")):
            data = getattr(r, attr)
            if data is not None:
                images.append({"mime_type": mime, "data": base64.b64encode(data).decode()})
    return {
        "images": images,
        "files": ["/workspace/" + f.path for f in execution.files_changed if f.change != "deleted"],
        "execution": execution.raw,
    }


class _Runner:
    """Runs code in the given sandbox, or in one created on first use (and
    ended when the program exits)."""

    def __init__(self, sandbox, create_kwargs):
        self.sandbox = sandbox
        self._kwargs = create_kwargs
        self._lock = threading.Lock()

    def get(self):
        with self._lock:
            if self.sandbox is None:
                from .sandbox import Sandbox
                self.sandbox = Sandbox.create(**self._kwargs)
                atexit.register(self.sandbox.kill)
            return self.sandbox

    def __call__(self, code, timeout=None):
        execution = self.get().run_code(code, timeout=timeout)
        return format_execution(execution), _artifact(execution)


def as_tool(sandbox=None, name="python_code_interpreter", description=DESCRIPTION, timeout=None, **create_kwargs):
    """Returns a LangChain StructuredTool that runs Python in sandbox (or,
    with None, in a sandbox created on first use with ``create_kwargs`` and
    kept for every later call, so state persists).

    The tool takes ``{"code": str}``; its response format is
    "content_and_artifact": the content is text a model reads well
    (stdout, the result, the traceback, files written), the artifact a dict
    with the images ({"mime_type", "data" base64}), the files and the raw
    execution. ``timeout`` (seconds) bounds each call.
    """
    try:
        from langchain_core.tools import StructuredTool
    except ImportError as e:
        raise ImportError(
            "airlock.langchain.as_tool needs langchain-core: pip install langchain-core "
            "(airlock itself does not depend on it)") from e
    runner = _Runner(sandbox, create_kwargs)

    def python_code_interpreter(code: str):
        return runner(code, timeout)

    python_code_interpreter.__doc__ = description
    tool = StructuredTool.from_function(
        func=python_code_interpreter,
        name=name,
        description=description,
        response_format="content_and_artifact",
    )
    return tool
