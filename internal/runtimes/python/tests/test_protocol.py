"""The protocol of docs/runtime-protocol.md: hello, configure, execute, shutdown, framing."""

from __future__ import annotations

import json
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
import unittest
from typing import Optional

import harness
from harness import Runtime, SessionMixin


class HelloConfigureShutdownTest(unittest.TestCase):
    def test_hello(self) -> None:
        rt = Runtime(configure=False)
        try:
            self.assertEqual(rt.hello["language"], "python")
            self.assertEqual(rt.hello["version"], "%d.%d.%d" % sys.version_info[:3])
            self.assertEqual(rt.hello["pid"], rt.pid)
        finally:
            rt.close()

    def test_configure_replaces_environment_and_changes_directory(self) -> None:
        rt = Runtime(configure=False)
        try:
            with tempfile.TemporaryDirectory() as d:
                env = {"ONLY": "this", "PATH": "/usr/bin:/bin", "EMPTY": "", "UNICODE": "h\u00e9llo"}
                reply = rt.configure(env=env, cwd=d)
                self.assertNotIn("error", reply)
                ex = rt.execute("import os, json\nprint(json.dumps(dict(os.environ)))\nos.getcwd()")
                self.assertEqual(ex.status, "ok", ex.messages)
                self.assertEqual(json.loads(ex.out), env)
                self.assertEqual(ex.text, repr(os.path.realpath(d)))
                ex = rt.execute("!echo $ONLY")
                self.assertEqual(ex.out, "this\n")
        finally:
            rt.close()

    def test_configure_bad_directory_is_reported_not_fatal(self) -> None:
        rt = Runtime(configure=False)
        try:
            reply = rt.configure(env={"A": "1"}, cwd="/nonexistent/dir")
            self.assertIn("nonexistent", reply.get("error", ""))
            self.assertEqual(rt.execute("1 + 1").text, "2")
        finally:
            rt.close()

    def test_configure_reseed(self) -> None:
        """A configure with reseed (a restored fork) gives random's and
        numpy's global generators new state from the kernel, and keeps the
        environment and directory."""
        rt = Runtime()
        try:
            setup = "import os, random\nrandom.seed(7)\ndraw = lambda: [random.random()]"
            if harness.has_module("numpy"):
                setup += "\nimport numpy as np\nnp.random.seed(7)\ndraw = lambda: [random.random(), float(np.random.rand())]"
            self.assertEqual(rt.execute(setup).status, "ok")
            seeded = rt.execute("draw()").text
            rt.execute("random.seed(7)\nif 'np' in globals(): np.random.seed(7)")
            self.assertEqual(rt.execute("draw()").text, seeded)  # the state is what decides
            rt.execute("random.seed(7)\nif 'np' in globals(): np.random.seed(7)")
            cwd = rt.execute("os.getcwd()").text
            rt.send({"type": "configure", "reseed": True})
            reply = rt.recv()
            self.assertEqual(reply, {"type": "configured", "reseeded": True})
            drawn = rt.execute("draw()").text
            self.assertEqual(len(drawn.split(",")), len(seeded.split(",")))
            for a, b in zip(seeded.strip("[]").split(","), drawn.strip("[]").split(",")):
                self.assertNotEqual(a, b, f"a generator was not reseeded: {seeded} then {drawn}")
            self.assertEqual(rt.execute("os.getcwd()").text, cwd)
        finally:
            rt.close()

    def test_shutdown_exits_zero_and_runs_atexit(self) -> None:
        harness.check_shutdown_runs_atexit(self, Runtime())

    def test_eof_exits_zero(self) -> None:
        rt = Runtime()
        try:
            rt.sock.shutdown(socket.SHUT_WR)
            self.assertEqual(rt.wait_exit(), 0)
        finally:
            rt.close()

    def test_shutdown_does_not_wait_for_user_threads(self) -> None:
        rt = Runtime()
        try:
            rt.execute("import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()")
            rt.send({"type": "shutdown"})
            self.assertEqual(rt.wait_exit(timeout=10), 0)
        finally:
            rt.close()


class MalformedFrameTest(unittest.TestCase):
    """Any malformed frame is fatal: exit status 2, and the reason on stderr."""

    #: How the runtime starts (None: as the server starts it).
    argv: Optional[list] = None

    def assertFatal(self, data: bytes, why: str, close: bool = False) -> None:
        rt = Runtime(argv=self.argv)
        try:
            self.assertEqual(rt.execute("x = 1").status, "ok")
            rt.send_raw(data)
            if close:
                rt.sock.shutdown(socket.SHUT_WR)
            self.assertEqual(rt.wait_exit(), 2)
            _, err = rt._drain_pipes()
            self.assertTrue(err.startswith(b"airlock runtime: fatal protocol error: " + why.encode()),
                            f"stderr {err!r} does not give the reason {why!r}")
        finally:
            rt.close()

    def frame(self, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + body

    def test_invalid_json(self) -> None:
        self.assertFatal(self.frame(b"{not json"), "invalid JSON")

    def test_whitespace_around_the_object(self) -> None:
        # JSON's own whitespace is no trailing data; any other is.
        rt = Runtime(argv=self.argv)
        try:
            rt.send_raw(self.frame(b' \t\r\n{"type": "execute", "id": "e9", "code": "6 * 7"}\n\r\t '))
            self.assertEqual(rt.wait("e9").text, "42")
        finally:
            rt.close()
        self.assertFatal(self.frame(b'{"type": "shutdown"}\x0c'), "trailing data after the JSON object")
        self.assertFatal(self.frame(b'\xc2\xa0{"type": "shutdown"}'), "invalid JSON")

    def test_not_an_object(self) -> None:
        self.assertFatal(self.frame(b"[1, 2]"), "a message must be a JSON object with a string 'type'")

    def test_trailing_data(self) -> None:
        self.assertFatal(self.frame(b'{"type": "shutdown"} x'), "trailing data after the JSON object")

    def test_invalid_utf8(self) -> None:
        # A well-formed execute but for one byte that is not UTF-8.
        self.assertFatal(self.frame(b'{"type": "execute", "id": "e9", "code": "\'\xff\'"}'), "frame is not UTF-8")

    def test_unknown_type(self) -> None:
        self.assertFatal(self.frame(b'{"type": "launch-missiles"}'), "unknown message type 'launch-missiles'")

    def test_execute_with_code_not_a_string(self) -> None:
        self.assertFatal(self.frame(b'{"type": "execute", "id": "e9", "code": 1}'),
                         "execute needs a string 'id' and a string 'code'")

    def test_oversized_frame(self) -> None:
        self.assertFatal(struct.pack(">I", (64 << 20) + 1), f"frame of {(64 << 20) + 1} bytes exceeds")

    def test_empty_frame(self) -> None:
        self.assertFatal(struct.pack(">I", 0), "invalid JSON")  # an empty body is no JSON

    def test_eof_inside_frame(self) -> None:
        self.assertFatal(struct.pack(">I", 100) + b'{"type"', "end of file inside a frame", close=True)

    def test_bad_configure(self) -> None:
        self.assertFatal(self.frame(b'{"type": "configure", "env": {"A": 1}}'),
                         "configure: 'env' must map strings to strings")


class MalformedFrameWithoutAcceleratorTest(MalformedFrameTest):
    """The same frames on an interpreter without CPython's _json (the
    wire then decodes with json's own Python scanner)."""

    argv = [harness.PYTHON, "-I", "-B", "-c",
            "import sys; sys.modules['_json'] = None; "
            f"sys.path.insert(0, {harness.RUNTIME_DIR!r}); import airlock_runtime; airlock_runtime.main()"]


class EncodeDoneTest(unittest.TestCase):
    """A done message written out directly is the generic encoder's."""

    def test_same_bytes(self) -> None:
        sys.path.insert(0, harness.RUNTIME_DIR)
        try:
            from airlock_runtime import wire
        finally:
            sys.path.remove(harness.RUNTIME_DIR)
        for msg_id in ("e1", "", "é\u2028\"\\\n", "\ud800", "x" * 300):
            for status in ("ok", "error", "interrupted", "exited", "odd"):
                for count, code in ((1, 0), (0, 1), (2**70, -3), (True, 0)):
                    msg = {"type": "done", "id": msg_id, "status": status,
                           "execution_count": count, "exit_code": code}
                    with self.subTest(msg=msg):
                        self.assertEqual(wire.encode_done(msg_id, status, count, code), wire.encode(msg))


class ExecuteTest(SessionMixin, unittest.TestCase):
    def test_state_persists(self) -> None:
        self.ok("import math\ncounter = 40\ndef bump(n):\n    global counter\n    counter += n\n    return counter")
        self.ok("class Thing:\n    size = 3")
        self.assertEqual(self.value("bump(1) + Thing.size"), "44")
        self.assertEqual(self.value("counter"), "41")
        self.assertEqual(self.value("math.floor(2.5)"), "2")

    def test_final_expression(self) -> None:
        self.assertEqual(self.value("1 + 1"), "2")
        self.assertEqual(self.value('"s"'), "'s'")
        self.assertEqual(self.value("x = 5\nx * 2"), "10")
        self.assertEqual(self.value("[1, 2]  # comment"), "[1, 2]")
        self.assertEqual(self.value("a = 1; a + 1"), "2")
        self.assertEqual(self.value("(1 +\n 2)"), "3")

    def test_no_result(self) -> None:
        self.assertIsNone(self.value("None"))
        self.assertIsNone(self.value("y = 3"))
        self.assertIsNone(self.value("1 + 1;"))
        self.assertIsNone(self.value("1 + 1;  # suppressed"))
        self.assertIsNone(self.value("print('x')"))
        self.assertIsNone(self.value(""))
        self.assertIsNone(self.value("# only a comment"))
        self.assertIsNone(self.value("if True:\n    5"))

    def test_empty_cell_does_nothing(self) -> None:
        # No code (an encoder that drops empty strings), "" or blanks: an
        # empty cell, which changes nothing but the execution count.
        for msg in ({}, {"code": ""}, {"code": " \n\t\n"}):
            self.ok("kept = 41\n42")
            self.rt.counter += 1
            exec_id = f"e{self.rt.counter}"
            self.rt.send({"type": "execute", "id": exec_id, **msg})
            ex = self.rt.wait(exec_id)
            self.assertEqual([m["type"] for m in ex.messages], ["done"], msg)
            self.assertEqual((ex.status, ex.done["exit_code"], ex.out, ex.err), ("ok", 0, "", ""), msg)
            self.assertEqual(self.value("(kept + 1, _)"), "(42, 42)", msg)

    def test_runtime_modules_are_not_top_level(self) -> None:
        # The runtime is a package: user code's `import session` or `import
        # display` must not find its modules, and its directory (for
        # airlock_mpl) comes after the cwd and the standard library.
        ex = self.ok("import importlib.util, sys\n"
                     "print([n for n in ('wire', 'current', 'display', 'magics', 'syntax', 'tracebacks', 'program',\n"
                     "                           'session', 'osm')\n"
                     "       if importlib.util.find_spec(n) is not None or n in sys.modules])\n"
                     "print(sys.path[0] == '', sys.path[-1] == __import__('airlock_runtime').current.RUNTIME_DIR)")
        self.assertEqual(ex.out, "[]\nTrue True\n")

    def test_only_the_last_expression_is_shown(self) -> None:
        ex = self.ok("1\n2\n3")
        self.assertEqual(ex.text, "3")

    def test_underscore(self) -> None:
        self.ok("40 + 2")
        self.assertEqual(self.value("_"), "42")
        self.ok("'a'")
        self.ok("'b'")
        self.assertEqual(self.value("(_, __, ___)"), "('b', 'a', 42)")
        self.ok("_ = 'mine'")
        self.ok("'new result'")
        self.assertEqual(self.value("_"), "'mine'")  # a user-assigned _ is left alone

    def test_execution_count_and_result_fields(self) -> None:
        ex1 = self.ok("10")
        ex2 = self.ok("20")
        self.assertEqual(ex2.done["execution_count"], ex1.done["execution_count"] + 1)
        self.assertEqual(ex2.result["execution_count"], ex2.done["execution_count"])
        self.assertEqual(ex2.result["metadata"], {})
        self.assertEqual(ex2.done["exit_code"], 0)

    def test_stdout_and_stderr(self) -> None:
        ex = self.ok("import sys\nprint('out', end='')\nprint('err', file=sys.stderr, end='')\n"
                     "sys.stdout.write('partial')")
        self.assertEqual(ex.out, "outpartial")
        self.assertEqual(ex.err, "err")

    def test_subprocess_output(self) -> None:
        ex = self.ok("import subprocess\nprint('before')\nsubprocess.run(['echo', 'child'])\nprint('after')")
        self.assertEqual(ex.out, "before\nchild\nafter\n")

    def test_unicode_output(self) -> None:
        ex = self.ok("print('h\u00e9llo \u2603')\n'\u2603 \\udc80'")
        self.assertEqual(ex.out, "h\u00e9llo \u2603\n")
        self.assertEqual(ex.text, "'\u2603 \\udc80'")
        ex = self.ok("print('\\udc80')")  # unencodable: backslashreplace
        self.assertEqual(ex.out, "\\udc80\n")

    def test_main_module(self) -> None:
        ex = self.ok("if __name__ == '__main__':\n    print('main')\nimport sys\n"
                     "sys.modules['__main__'].__dict__ is globals()")
        self.assertEqual(ex.out, "main\n")
        self.assertEqual(ex.text, "True")

    def test_pickle_class_and_function_defined_in_cell(self) -> None:
        self.ok("import pickle\nclass Point:\n    def __init__(self, x):\n        self.x = x\n"
                "def double(v):\n    return 2 * v")
        self.assertEqual(self.value("p = pickle.loads(pickle.dumps(Point(3)))\n(type(p) is Point, p.x)"),
                         "(True, 3)")
        self.assertEqual(self.value("pickle.loads(pickle.dumps(double))(4)"), "8")

    def test_inspect_getsource_of_cell_function(self) -> None:
        self.ok("def documented():\n    return 'src'")
        self.assertIn("return 'src'", self.value("import inspect\ninspect.getsource(documented)"))

    def test_future_import_persists(self) -> None:
        # As in IPython (codeop's compiler): in force from the cell that
        # imports it on, in later cells and in what %time and %timeit
        # compile, which had no futures of their own before.
        self.failing("def e(x: UndefinedName) -> None: pass", "NameError")
        self.ok("from __future__ import annotations")
        self.assertEqual(self.value("def f(x: UndefinedName) -> None: pass\nf.__annotations__['x']"),
                         "'UndefinedName'")
        self.assertEqual(self.value("%time def g(x: Undefined2) -> None: pass\ng.__annotations__['x']"),
                         "'Undefined2'")
        ex = self.ok("%timeit -n 1 -r 1 def h(x: Undefined3) -> None: pass")
        self.assertIn("per loop", ex.out)
        ex = self.ok("%%timeit -n 1 -r 1\ndef h(x: Undefined4) -> None: pass")
        self.assertIn("per loop", ex.out)

    def test_input_raises_eoferror(self) -> None:
        self.failing("input('name? ')", "EOFError")

    def test_import_from_working_directory(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "airlock_test_helper_mod.py"), "w") as f:
                f.write("VALUE = 7\n")
            self.ok(f"import os\nos.chdir({d!r})")
            self.assertEqual(self.value("import airlock_test_helper_mod\nairlock_test_helper_mod.VALUE"), "7")

    def test_warnings_name_the_cell(self) -> None:
        ex = self.ok("import warnings\nwarnings.warn('careful')")
        n = ex.done["execution_count"]
        self.assertEqual(ex.err, f"Cell In[{n}]:2: UserWarning: careful\n  warnings.warn('careful')\n")

    def test_help(self) -> None:
        self.assertIn("Return the number of items", self.ok("help(len)").out)

    def test_argv(self) -> None:
        self.assertEqual(self.value("import sys\nsys.argv"), "['']")


class ErrorTest(SessionMixin, unittest.TestCase):
    def test_exception_then_normal_call(self) -> None:
        ex = self.failing("print('partial')\n1/0", "ZeroDivisionError")
        self.assertEqual(ex.out, "partial\n")
        self.assertEqual(ex.error["value"], "division by zero")
        self.assertEqual(ex.done["exit_code"], 1)
        tb = ex.error["traceback"]
        n = ex.done["execution_count"]
        self.assertEqual(tb[0], "Traceback (most recent call last):")
        self.assertIn(f"  Cell In[{n}], line 2", tb)
        self.assertIn("    1/0", tb)
        self.assertEqual(tb[-1], "ZeroDivisionError: division by zero")
        self.assertEqual(self.value("x = 5\nx"), "5")

    def test_traceback_through_functions_of_earlier_cells(self) -> None:
        first = self.ok("def inner():\n    raise ValueError('bad value')\n")
        n1 = first.done["execution_count"]
        ex = self.failing("def outer():\n    inner()\nouter()", "ValueError")
        n2 = ex.done["execution_count"]
        tb = ex.error["traceback"]
        self.assertIn(f"  Cell In[{n2}], line 3", tb)
        self.assertIn(f"  Cell In[{n2}], line 2, in outer", tb)
        self.assertIn(f"  Cell In[{n1}], line 2, in inner", tb)
        self.assertIn("    raise ValueError('bad value')", tb)
        self.assertEqual(tb[-1], "ValueError: bad value")

    def test_library_frames_are_kept(self) -> None:
        ex = self.failing("import json\njson.loads('{')", "JSONDecodeError")
        self.assertTrue(any('File "' in line and "json" in line for line in ex.error["traceback"]))

    def test_chained_exceptions(self) -> None:
        ex = self.failing("try:\n    1/0\nexcept Exception as e:\n    raise KeyError('k') from e", "KeyError")
        text = "\n".join(ex.error["traceback"])
        self.assertIn("ZeroDivisionError", text)
        self.assertIn("direct cause", text)

    def test_syntax_error(self) -> None:
        ex = self.failing("never_assigned = 1\ny = (", "SyntaxError")
        n = ex.done["execution_count"]
        self.assertEqual(ex.error["traceback"], [
            f"  Cell In[{n}], line 2", "    y = (", "        ^", "SyntaxError: '(' was never closed"])
        self.assertNotIn("<cell", ex.error["value"])
        # Nothing ran.
        self.failing("never_assigned", "NameError")

    def test_indentation_error(self) -> None:
        ex = self.failing("def f():\nreturn 1", "IndentationError")
        self.assertIn("    return 1", ex.error["traceback"])
        self.assertTrue(any(set(line.strip()) == {"^"} for line in ex.error["traceback"]))

    def test_system_exit(self) -> None:
        ex = self.failing("import sys\nsys.exit(3)", "SystemExit")
        self.assertEqual(ex.done["exit_code"], 3)
        self.assertEqual(ex.error["value"], "3")
        ex = self.failing("raise SystemExit('message')", "SystemExit")
        self.assertEqual(ex.done["exit_code"], 1)
        self.assertEqual(ex.error["value"], "message")
        self.assertEqual(self.value("'still alive'"), "'still alive'")

    def test_clean_system_exit_is_ok(self) -> None:
        ex = self.ok("print('a')\nexit()\nprint('b')")
        self.assertEqual(ex.out, "a\n")
        self.assertIsNone(ex.error)
        self.ok("import sys\nsys.exit(0)")
        self.assertEqual(self.value("1"), "1")

    def test_user_raised_keyboard_interrupt_is_an_error(self) -> None:
        ex = self.failing("raise KeyboardInterrupt", "KeyboardInterrupt", status="error")
        self.assertEqual(ex.done["exit_code"], 1)

    def test_base_exception_subclasses(self) -> None:
        self.failing("class Boom(BaseException):\n    pass\nraise Boom('x')", "Boom")
        self.failing("raise GeneratorExit", "GeneratorExit")
        self.assertEqual(self.value("2 + 2"), "4")

    def test_recursion_error(self) -> None:
        ex = self.failing("def f(n):\n    return f(n + 1)\nf(0)", "RecursionError")
        self.assertLess(len(ex.error["traceback"]), 100)  # repeated frames are collapsed
        self.assertTrue(any("repeated" in line for line in ex.error["traceback"]))
        self.assertEqual(self.value("sum(range(10))"), "45")

    def test_exception_with_broken_str(self) -> None:
        ex = self.failing("class E(Exception):\n    def __str__(self):\n        raise RuntimeError\nraise E()", "E")
        self.assertEqual(self.value("1"), "1")

    def test_exception_notes(self) -> None:
        ex = self.failing("e = ValueError('v')\ne.add_note('a note')\nraise e", "ValueError")
        self.assertIn("a note", ex.error["traceback"])

    def test_huge_exception_message_is_capped(self) -> None:
        ex = self.failing("raise ValueError('x' * (20 << 20))", "ValueError")
        self.assertLess(len(ex.error["value"]), 5 << 20)
        self.assertLess(sum(map(len, ex.error["traceback"])), 10 << 20)


class PerformanceTest(unittest.TestCase):
    def test_trivial_execution_round_trip(self) -> None:
        rt = Runtime()
        try:
            sock = rt.sock
            sock.setblocking(True)

            def roundtrip(i: int) -> float:
                body = json.dumps({"type": "execute", "id": f"p{i}", "code": "x = 1"}).encode()
                t0 = time.perf_counter()
                sock.sendall(struct.pack(">I", len(body)) + body)
                n = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))[0]
                msg = json.loads(sock.recv(n, socket.MSG_WAITALL))
                elapsed = time.perf_counter() - t0
                self.assertEqual(msg["type"], "done")
                return elapsed

            for i in range(50):
                roundtrip(i)
            times = [roundtrip(i) for i in range(50, 550)]
            median = statistics.median(times)
            print(f"\n  x = 1 round trip: median {median * 1e6:.0f} \u00b5s, "
                  f"p90 {sorted(times)[int(len(times) * 0.9)] * 1e6:.0f} \u00b5s", file=sys.stderr)
            self.assertLess(median, 0.001)
        finally:
            rt.close()


if __name__ == "__main__":
    unittest.main()
