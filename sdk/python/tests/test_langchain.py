"""airlock.langchain.as_tool with a stub langchain_core (PyPI is not
reachable, so the real one is not installed): the stub keeps the real
API's shape (StructuredTool.from_function, response_format
"content_and_artifact" returning a (content, artifact) tuple, a tool call
giving a ToolMessage) and the tool runs against a real server."""

import base64
import os
import subprocess
import sys
import tempfile
import types
import unittest

import support
import airlock
from airlock import Sandbox
from airlock import langchain as airlock_langchain

# The keyword arguments langchain_core's StructuredTool.from_function takes.
FROM_FUNCTION_KWARGS = {"func", "coroutine", "name", "description", "return_direct", "args_schema", "infer_schema",
                        "response_format", "parse_docstring", "error_on_invalid_docstring", "metadata", "tags"}


class ToolMessage:
    def __init__(self, content, artifact=None, tool_call_id="", name=""):
        self.content, self.artifact, self.tool_call_id, self.name = content, artifact, tool_call_id, name


class StructuredTool:
    def __init__(self, func, name, description, response_format):
        self.func, self.name, self.description, self.response_format = func, name, description, response_format

    @classmethod
    def from_function(cls, func=None, name=None, description=None, **kwargs):
        unknown = set(kwargs) - FROM_FUNCTION_KWARGS
        if unknown:
            raise TypeError("from_function() got unexpected keyword arguments %s" % unknown)
        return cls(func, name or func.__name__, description or func.__doc__, kwargs.get("response_format", "content"))

    def invoke(self, tool_input):
        call = tool_input if isinstance(tool_input, dict) and tool_input.get("type") == "tool_call" else None
        args = call["args"] if call else tool_input
        out = self.func(**args)
        if self.response_format == "content_and_artifact":
            if not (isinstance(out, tuple) and len(out) == 2):
                raise ValueError("content_and_artifact tools must return a (content, artifact) tuple")
            content, artifact = out
        else:
            content, artifact = out, None
        if call:
            return ToolMessage(content, artifact, call["id"], self.name)
        return content


def install_stub():
    """Puts the stub langchain_core in sys.modules for the test's duration."""
    pkg = types.ModuleType("langchain_core")
    pkg.__path__ = []
    tools = types.ModuleType("langchain_core.tools")
    tools.StructuredTool = StructuredTool
    messages = types.ModuleType("langchain_core.messages")
    messages.ToolMessage = ToolMessage
    pkg.tools, pkg.messages = tools, messages
    saved = {k: sys.modules.get(k) for k in ("langchain_core", "langchain_core.tools", "langchain_core.messages")}
    sys.modules.update({"langchain_core": pkg, "langchain_core.tools": tools, "langchain_core.messages": messages})

    def restore():
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return restore


def call(tool, code, call_id="call_1"):
    return tool.invoke({"type": "tool_call", "name": tool.name, "args": {"code": code}, "id": call_id})


class LangChainToolTest(unittest.TestCase):
    def setUp(self):
        support.need_server(self)
        self.addCleanup(install_stub())

    def test_tool_in_a_sandbox(self):
        with Sandbox.create() as sbx:
            tool = airlock_langchain.as_tool(sbx)
            self.assertEqual(tool.name, "python_code_interpreter")
            self.assertEqual(tool.response_format, "content_and_artifact")
            self.assertIn("/workspace", tool.description)
            self.assertEqual(call(tool, "x = 41").content, "(no output)")
            msg = call(tool, "print('adding')\nx + 1", "call_2")
            self.assertEqual(msg.content, "adding\n42")
            self.assertEqual(msg.tool_call_id, "call_2")
            self.assertEqual(msg.artifact["images"], [])
            # plain invocation (no tool call) returns the content only
            self.assertEqual(tool.invoke({"code": "x"}), "41")

            msg = call(tool, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.savefig('plot.png')\nplt.show()")
            self.assertIn("[image/png returned to the user]", msg.content)
            self.assertIn("files written: /workspace/plot.png", msg.content)
            self.assertNotIn("iVBOR", msg.content)  # no base64 for the model
            images = msg.artifact["images"]
            self.assertEqual([i["mime_type"] for i in images], ["image/png"])
            self.assertTrue(base64.b64decode(images[0]["data"]).startswith(b"\x89PNG"))
            self.assertEqual(msg.artifact["files"], ["/workspace/plot.png"])
            self.assertEqual(sbx.files.read("plot.png", format="bytes")[:4], b"\x89PNG")

            msg = call(tool, "def f(d):\n    return d['missing']\nf({})")
            self.assertIn("KeyError", msg.content)
            self.assertIn("return d['missing']", msg.content)  # the traceback, the user's code
            self.assertIn("Traceback", msg.content)
            self.assertEqual(msg.artifact["execution"]["error"]["name"], "KeyError")

            msg = call(tool, "import sys\nprint('careful', file=sys.stderr)")
            self.assertEqual(msg.content, "stderr:\ncareful")

    def test_tool_without_a_sandbox_creates_one_on_first_use(self):
        before = {s["id"] for s in Sandbox.list()}
        tool = airlock_langchain.as_tool(None, name="py", limits={"timeout": 20})
        self.assertEqual(tool.name, "py")
        self.assertEqual({s["id"] for s in Sandbox.list()}, before)  # nothing yet
        call(tool, "y = 'kept'")
        self.assertEqual(call(tool, "y").content, "'kept'")
        new = [s for s in Sandbox.list() if s["id"] not in before and s["state"] != "ended"]
        self.assertEqual(len(new), 1)
        self.assertEqual(new[0]["limits"]["timeout"], "20s")
        Sandbox.connect(new[0]["id"]).kill()

    def test_timeout(self):
        with Sandbox.create() as sbx:
            tool = airlock_langchain.as_tool(sbx, timeout=0.5)
            msg = call(tool, "import time\ntime.sleep(20)")
            self.assertIn("TimeoutError: the code ran into its timeout of 500ms", msg.content)
            self.assertIn("were kept", msg.content)
            self.assertIn("(stopped: timeout)", msg.content)


class OfflineTest(unittest.TestCase):
    def test_missing_langchain_core_says_what_to_install(self):
        saved = {k: sys.modules.get(k) for k in ("langchain_core", "langchain_core.tools")}
        sys.modules["langchain_core"] = None  # import fails as if not installed
        sys.modules["langchain_core.tools"] = None
        try:
            with self.assertRaises(ImportError) as cm:
                airlock_langchain.as_tool(None)
            self.assertIn("pip install langchain-core", str(cm.exception))
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v

    def test_import_airlock_never_imports_langchain_core(self):
        # A langchain_core that fails loudly when imported, first on the path.
        d = tempfile.mkdtemp(prefix="airlock-poison-")
        os.mkdir(os.path.join(d, "langchain_core"))
        with open(os.path.join(d, "langchain_core", "__init__.py"), "w") as f:
            f.write("raise RuntimeError('langchain_core was imported')\n")
        code = ("import sys, airlock, airlock.langchain, airlock.sandbox, airlock.models, airlock.errors\n"
                "assert 'langchain_core' not in sys.modules, 'imported'\n"
                "try:\n    airlock.langchain.as_tool(None)\nexcept RuntimeError as e:\n    print('poisoned:', e)\n")
        env = dict(os.environ, PYTHONPATH=d + os.pathsep + support.SDK, PYTHONDONTWRITEBYTECODE="1")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        # the poison was on the path: as_tool, and only as_tool, imported it
        self.assertEqual(p.stdout.strip(), "poisoned: langchain_core was imported")

    def test_format_execution(self):
        e = airlock.Execution({
            "stdout": "\x1b[31mred\x1b[0m\n", "stdout_truncated": True, "stdout_dropped_bytes": 7, "stderr": "",
            "results": [{"type": "display", "data": {"text/plain": "<Figure>", "image/png": base64.b64encode(b"\x89PNG").decode()}},
                        {"type": "display", "data": {"text/plain": "shown"}},
                        {"type": "result", "data": {"text/plain": "42"}}],
            "error": {"name": "MemoryError", "value": "", "traceback": ["Traceback (most recent call last):", "MemoryError"]},
            "killed": True, "kill_reason": "memory", "session_ended": True, "end_reason": "out of memory",
            "files_changed": [{"path": "a.csv", "size": 1, "change": "created"},
                              {"path": "gone", "size": 0, "change": "deleted"}]})
        self.assertEqual(airlock_langchain.format_execution(e), "\n".join([
            "red", "(stdout truncated: 7 bytes dropped past max_output)", "[image/png returned to the user]", "display: shown", "42",
            "Traceback (most recent call last):\nMemoryError", "(stopped: memory)",
            "(the sandbox ended: out of memory; its state is lost)", "files written: /workspace/a.csv"]))
        long = airlock.Execution({"stdout": "x" * (airlock_langchain.MAX_CHARS + 5)})
        self.assertTrue(airlock_langchain.format_execution(long).endswith("... (5 more characters)"))


if __name__ == "__main__":
    unittest.main()
