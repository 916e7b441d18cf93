"""The protocol loop survives whatever user code does (short of killing the process)."""

from __future__ import annotations

import json
import struct
import time
import unittest

from harness import Runtime, SessionMixin


class StdioSabotageTest(SessionMixin, unittest.TestCase):
    def test_replacing_sys_stdout(self) -> None:
        ex = self.ok("import sys, io\nsaved = sys.stdout\nbuf = io.StringIO()\nsys.stdout = buf\nprint('hidden')\n42")
        self.assertEqual(ex.out, "")
        self.assertEqual(ex.text, "42")
        self.ok("print('still hidden')")
        ex = self.ok("sys.stdout = saved\nprint(buf.getvalue(), end='')")
        self.assertEqual(ex.out, "hidden\nstill hidden\n")

    def test_stdout_without_flush(self) -> None:
        ex = self.ok("import sys\nclass Sink:\n    def write(self, s):\n        return len(s)\nsaved = sys.stdout\n"
                     "sys.stdout = Sink()\nprint('gone')\n'value'")
        self.assertEqual(ex.text, "'value'")
        ex = self.ok("sys.stdout = saved\nprint('back')")
        self.assertEqual(ex.out, "back\n")

    def test_closing_sys_stdout_and_stderr(self) -> None:
        self.ok("import sys\nsys.stdout.close()\nsys.stderr.close()")
        ex = self.ok("import sys\nprint('out again')\nprint('err again', file=sys.stderr)")
        self.assertEqual(ex.out, "out again\n")
        self.assertEqual(ex.err, "err again\n")

    def test_setting_stdout_to_none(self) -> None:
        self.ok("import sys\nsys.stdout = None\nprint('dropped')")
        self.assertEqual(self.ok("print('restored')").out, "restored\n")

    def test_closing_fd_1_and_2(self) -> None:
        ex = self.rt.execute("import os\nprint('before', flush=True)\nos.close(1)\nos.close(2)\nprint('lost')")
        self.assertIn(ex.status, ("ok", "error"))
        ex = self.ok("print('after')\n!echo shell")
        self.assertEqual(ex.out, "after\nshell\n")

    def test_closing_fds_0_to_2(self) -> None:
        # The runtime finds them closed (one poll for the three) and opens
        # them again; stdin reads end of file as before. (A runtime of its
        # own: test_closing_fd_3 may have closed a saved copy.)
        rt = Runtime()
        try:
            ex = rt.execute("import os\nos.close(0)\nos.close(1)\nos.close(2)")
            self.assertEqual(ex.status, "ok", ex.messages)
            ex = rt.execute("import os\nprint(os.read(0, 1))\n!echo shell")
            self.assertEqual((ex.status, ex.out), ("ok", "b''\nshell\n"), ex.messages)
        finally:
            rt.close()

    def test_select_replaced(self) -> None:
        # The runtime's polls (an interrupt waiting, fds 0-2 closed) were
        # made before any cell: a cell replacing select breaks neither.
        rt = Runtime()
        try:
            ex = rt.execute("import sys\nsys.modules['select'] = None\nran = 'no'")
            self.assertEqual(ex.status, "ok", ex.messages)
            frames = b""
            for msg in ({"type": "execute", "id": "early", "code": "ran = 'yes'"},
                        {"type": "interrupt", "id": "early"}):
                body = json.dumps(msg).encode()
                frames += struct.pack(">I", len(body)) + body
            rt.send_raw(frames)
            ex = rt.wait("early", timeout=30)
            self.assertEqual(ex.status, "interrupted", ex.messages)
            ex = rt.execute("import os\nos.close(1)")
            self.assertEqual(ex.status, "ok", ex.messages)
            ex = rt.execute("print(ran)")
            self.assertEqual((ex.status, ex.out), ("ok", "no\n"), ex.messages)
        finally:
            rt.close()

    def test_closing_fd_3(self) -> None:
        # fd 3 is not the control socket any more once the runtime runs.
        self.ok("import os\ntry:\n    os.close(3)\nexcept OSError:\n    pass")
        self.assertEqual(self.value("'alive'"), "'alive'")

    def test_closing_stdin(self) -> None:
        self.ok("import sys\nsys.stdin.close()")
        self.failing("input()", "EOFError")

    def test_large_output(self) -> None:
        ex = self.ok("import sys\nfor i in range(100):\n    sys.stdout.write('x' * 100_000 + '\\n')\n"
                     "sys.stderr.write('e' * 1_000_000)")
        self.assertEqual(len(ex.stdout), 100 * 100_001)
        self.assertEqual(len(ex.stderr), 1_000_000)

    def test_partial_line_is_flushed(self) -> None:
        ex = self.ok("print('no newline', end='')")
        self.assertEqual(ex.out, "no newline")


class BuiltinsSabotageTest(SessionMixin, unittest.TestCase):
    def test_monkeypatched_builtins(self) -> None:
        self.ok("import builtins\nsaved_builtins = dict(vars(builtins))\n"
                "for name in ('len', 'isinstance', 'repr', 'str', 'print', 'open', 'type', 'getattr',\n"
                "             'callable', 'dict', 'list', 'int', 'eval', 'compile', 'display', 'hasattr'):\n"
                "    setattr(builtins, name, None)")
        ex = self.rt.execute("x = 1")
        self.assertEqual(ex.status, "ok", ex.messages)
        ex = self.rt.execute("1/0")
        self.assertEqual(ex.status, "error")
        self.assertEqual(ex.error["name"], "ZeroDivisionError")
        ex = self.rt.execute("x")  # formatting the result may fail; the protocol must not
        self.assertIn(ex.status, ("ok", "error"))
        self.ok("builtins.__dict__.update(saved_builtins)")
        self.assertEqual(self.value("len([1, 2])"), "2")

    def test_deleting_magic_helper(self) -> None:
        self.ok("import builtins\ndel builtins.__airlock__")
        self.assertEqual(self.ok("!echo still works").out, "still works\n")

    def test_user_rebinding_display(self) -> None:
        self.ok("display = lambda *a: print('mine')")
        self.assertEqual(self.ok("display(1)").out, "mine\n")
        ex = self.ok("del display\nfrom IPython.display import display\ndisplay(1)")
        self.assertEqual(len(ex.displays), 1)

    def test_low_recursion_limit(self) -> None:
        self.ok("import sys\nsys.setrecursionlimit(50)")
        self.assertEqual(self.value("sys.getrecursionlimit() >= 200"), "True")

    def test_replacing_main_module_entries(self) -> None:
        self.ok("globals().clear()")
        self.assertEqual(self.value("1 + 1"), "2")
        self.assertEqual(self.value("import sys\n'__main__' in sys.modules"), "True")


class ProcessTest(SessionMixin, unittest.TestCase):
    def test_fork_without_exit_in_cell(self) -> None:
        ex = self.ok("import os\npid = os.fork()\nif pid == 0:\n    print('child', flush=True)\nelse:\n"
                     "    os.waitpid(pid, 0)\n    print('parent')\n'cell value'")
        self.assertEqual(ex.out, "child\nparent\n")
        self.assertEqual(ex.text, "'cell value'")
        self.assertEqual(self.value("'next'"), "'next'")

    def test_multiprocessing_fork(self) -> None:
        ex = self.ok("import multiprocessing as mp\ndef square(x):\n    return x * x\n"
                     "with mp.get_context('fork').Pool(2) as pool:\n    r = pool.map(square, range(5))\nr")
        self.assertEqual(ex.text, "[0, 1, 4, 9, 16]")

    def test_background_shell_job(self) -> None:
        ex = self.ok("!sleep 30 &\n'returned'", timeout=10)
        self.assertEqual(ex.text, "'returned'")

    def test_threads_printing(self) -> None:
        ex = self.ok("import threading\nts = [threading.Thread(target=print, args=(i,)) for i in range(5)]\n"
                     "[t.start() for t in ts]; [t.join() for t in ts];")
        self.assertEqual(sorted(ex.out.split()), ["0", "1", "2", "3", "4"])


class MemoryTest(unittest.TestCase):
    def test_memory_error_is_reported(self) -> None:
        rt = Runtime()
        try:
            ex = rt.execute("x = bytearray(1 << 62)")
            self.assertEqual(ex.status, "error")
            self.assertEqual(ex.error["name"], "MemoryError")
            self.assertEqual(rt.execute("1").text, "1")
        finally:
            rt.close()


class ManyExecutionsTest(unittest.TestCase):
    def test_many_executions_of_all_kinds(self) -> None:
        rt = Runtime()
        try:
            codes = ["x = 1", "x + 1", "1/0", "print('p')", "display(3)", "y = (", "import sys; sys.exit(2)"]
            t0 = time.monotonic()
            for i in range(300):
                ex = rt.execute(codes[i % len(codes)])
                self.assertEqual(ex.done["execution_count"], i + 1)
            self.assertLess(time.monotonic() - t0, 60)
        finally:
            rt.close()


if __name__ == "__main__":
    unittest.main()
