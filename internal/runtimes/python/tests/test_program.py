"""Program mode (docs/runtime-protocol.md): a ``run`` message makes the
runtime run a file as ``python3 FILE ARGS`` would, then exit.

Each case runs the same program both ways, with a real ``python3`` and
through the runtime, and compares what a user can see: stdout and stderr
bytes and the exit status.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import textwrap
import unittest
from typing import Optional

from harness import PYTHON, RUNTIME, RUNTIME_DIR, Runtime, base_env, has_module


def program_env(**extra: str) -> dict:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": tempfile.gettempdir(),
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.update(extra)
    return env


class ProgramModeTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="airlock-prog-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def write(self, source: str, name: str = "main.py") -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(textwrap.dedent(source))
        return path

    def direct(self, path: str, args: list, env: dict) -> tuple[bytes, bytes, int]:
        p = subprocess.run([PYTHON, path, *args], env=env, cwd=self.dir,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        code = p.returncode
        return p.stdout, p.stderr, 128 - code if code < 0 else code

    #: How the runtime starts: standalone (None), or as a template's
    #: child does (PooledProgramModeTest).
    runtime_argv: Optional[list] = None
    #: Added to the runtime's environment (and its configure).
    runtime_env: dict = {}

    def via_runtime(self, path: str, args: list, env: dict, fresh: bool = False) -> tuple[bytes, bytes, int]:
        rt = Runtime(argv=self.runtime_argv, env=base_env(**self.runtime_env))
        self.runtime_pid = rt.hello["pid"]
        try:
            rt.send({"type": "run", "id": "p1", "argv": [PYTHON, path, *args], "env": env,
                     "cwd": self.dir, "fresh": fresh})
            try:
                ex = rt.wait("p1", timeout=60)
            except EOFError:
                # The program ended the process itself (os._exit): its
                # status is the process's, as the server then reports.
                status = rt.wait_exit()
                ex = None
            else:
                done = ex.done
                self.assertEqual(ex.messages, [done], "a program run sends only done")
                self.assertEqual(done["status"], "exited")
                # The process ends with the program's status, its stdio closed.
                status = rt.wait_exit()
                self.assertEqual(status & 0xFF, done["exit_code"] & 0xFF)
            out, err = (ex.stdout, ex.stderr) if ex else (b"", b"")
            for fd, acc in ((rt.out_r, "out"), (rt.err_r, "err")):
                while True:
                    data = os.read(fd, 1 << 16)
                    if not data:
                        break
                    if acc == "out":
                        out += data
                    else:
                        err += data
            return out, err, done["exit_code"] if ex else (128 - status if status < 0 else status)
        finally:
            rt.close()

    def same(self, source: str, args: list = (), fresh: bool = False, **env: str) -> tuple[bytes, bytes, int]:
        path = self.write(source)
        e = program_env(**env)
        want = self.direct(path, list(args), e)
        got = self.via_runtime(path, list(args), e, fresh=fresh)
        self.assertEqual(got, want)
        return got

    def test_print(self) -> None:
        out, _, code = self.same("print(1)\n")
        self.assertEqual((out, code), (b"1\n", 0))

    def test_main_module_argv_path_and_file(self) -> None:
        out, _, _ = self.same("""
            import sys, os
            print(__name__, __file__ == os.path.abspath(__file__), sys.argv[1:])
            print(sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
            print(sys.modules['__main__'] is sys.modules[__name__])
            import builtins
            print(hasattr(builtins, 'display'), hasattr(builtins, '__airlock__'))
            print(sys.stdin.read() == '')
        """, args=["a", "b c", ""])
        self.assertIn(b"['a', 'b c', '']", out)

    def test_environment_is_exactly_the_given_one(self) -> None:
        out, _, _ = self.same("import os, json\nprint(json.dumps(sorted(os.environ)))\n", ONLY="x")
        self.assertIn(b'"ONLY"', out)

    def test_exit_statuses(self) -> None:
        for source, want in [("import sys\nsys.exit(3)\n", 3),
                             ("import sys\nsys.exit()\n", 0),
                             ("raise SystemExit(300)\n", 300 & 0xFF),
                             ("import sys\nsys.exit('bye')\n", 1),
                             ("raise ValueError('nope')\n", 1),
                             ("import os\nos._exit(7)\n", 7)]:
            with self.subTest(source=source):
                _, _, code = self.same(source)
                self.assertEqual(code, want)

    def test_what_site_gives(self) -> None:
        # The builtins site adds and its directories on sys.path, as
        # python3 FILE has them (LeanProgramModeTest: without site).
        _, _, code = self.same("""
            import builtins, sys
            print([p for p in sys.path if p.endswith('-packages')])  # site's directories
            for name in ('exit', 'quit', 'copyright', 'credits', 'license', 'help'):
                print(name, type(getattr(builtins, name)).__name__)
            print(repr(exit), repr(quit), repr(help))
            print(repr(copyright))
            quit(4)
        """)
        self.assertEqual(code, 4)

    def test_uncaught_exception_traceback_matches(self) -> None:
        _, err, code = self.same("""
            def f(x):
                return 1 / x
            print('before')
            f(0)
        """)
        self.assertEqual(code, 1)
        self.assertIn(b"ZeroDivisionError", err)
        self.assertNotIn(b"airlock_runtime", err)

    def test_chained_exception(self) -> None:
        self.same("""
            try:
                {}['k']
            except KeyError as e:
                raise RuntimeError('wrapped') from e
        """)

    def test_syntax_error(self) -> None:
        _, err, code = self.same("print(\n")
        self.assertEqual(code, 1)
        self.assertIn(b"SyntaxError", err)

    def test_keyboard_interrupt(self) -> None:
        _, err, code = self.same("raise KeyboardInterrupt\n")
        self.assertEqual(code, 130)
        self.assertIn(b"KeyboardInterrupt", err)

    def test_atexit_and_threads_finish_before_exit(self) -> None:
        out, _, _ = self.same("""
            import atexit, threading, time
            atexit.register(print, 'atexit')
            def late():
                time.sleep(0.2)
                print('thread')
            threading.Thread(target=late).start()
            print('main done')
        """)
        self.assertEqual(out, b"main done\nthread\natexit\n")

    def test_binary_and_unbuffered_output(self) -> None:
        out, err, _ = self.same("""
            import sys
            sys.stdout.buffer.write(b'\\xff\\x00raw\\n')
            print('text', flush=False)
            print('err', file=sys.stderr)
            sys.stdout.write('\\u00e9\\n')
        """)
        self.assertEqual(out, b"\xff\x00raw\ntext\n\xc3\xa9\n")
        self.assertEqual(err, b"err\n")

    def test_pickle_main_classes(self) -> None:
        self.same("""
            import pickle
            class C:
                pass
            print(type(pickle.loads(pickle.dumps(C()))).__name__)
        """)

    def test_fork_child_returning_from_main(self) -> None:
        out, _, code = self.same("""
            import os
            pid = os.fork()
            if pid == 0:
                print('child')
            else:
                os.waitpid(pid, 0)
                print('parent')
        """)
        self.assertEqual((out, code), (b"child\nparent\n", 0))

    def test_fresh_interpreter_honours_python_variables(self) -> None:
        out, _, _ = self.same("import sys\nprint(sys.flags.hash_randomization, 'numpy' in sys.modules)\n",
                              fresh=True, PYTHONHASHSEED="0")
        self.assertEqual(out, b"0 False\n")

    def test_program_run_imports_no_session_modules(self) -> None:
        # A program run is the runtime's first and last act: what only
        # cells need (ast, linecache, typing), and what the wire can do
        # without (json, re, enum), must not be imported before the
        # program starts: each costs milliseconds of every cold run.
        # Measured against a bare python3 on this host, whose site may
        # import some of them itself.
        probe = "import sys\nprint(sorted(m for m in ('ast', 'enum', 'json', 'linecache', 're', 'tokenize', 'typing') if m in sys.modules))\n"
        bare = subprocess.run([PYTHON, "-I", "-c", probe], capture_output=True, timeout=60, check=True).stdout
        out, _, code = self.via_runtime(self.write(probe), [], program_env())
        self.assertEqual((out, code), (bare, 0))

    def test_fresh_mode_runs_a_new_process(self) -> None:
        # Fresh: a new python3, a child of the runtime. Otherwise the runtime
        # itself runs the program.
        path = self.write("import os\nprint(os.getpid(), os.getppid())\n")
        for fresh in (False, True):
            with self.subTest(fresh=fresh):
                out, _, code = self.via_runtime(path, [], program_env(), fresh=fresh)
                self.assertEqual(code, 0)
                pid, ppid = map(int, out.split())
                if fresh:
                    self.assertEqual(ppid, self.runtime_pid)
                    self.assertNotEqual(pid, self.runtime_pid)
                else:
                    self.assertEqual(pid, self.runtime_pid)

    def test_missing_interpreter_in_fresh_mode(self) -> None:
        path = self.write("print(1)\n")
        rt = Runtime(env=base_env())
        try:
            rt.send({"type": "run", "id": "p1", "argv": ["/nonexistent/python", path], "env": program_env(),
                     "cwd": self.dir, "fresh": True})
            ex = rt.wait("p1")
            self.assertEqual(ex.done["exit_code"], 127)
            self.assertIn(b"/nonexistent/python", ex.stderr)
        finally:
            rt.close()

    @unittest.skipUnless(has_module("matplotlib"), "matplotlib is not installed")
    def test_matplotlib_is_plain_agg(self) -> None:
        out, _, _ = self.same("""
            import matplotlib
            import matplotlib.pyplot as plt
            plt.plot([1, 2])
            plt.savefig('fig.png')
            print(matplotlib.get_backend().lower())
        """)
        self.assertEqual(out, b"agg\n")

    def test_bad_run_messages_are_fatal(self) -> None:
        for msg in [{"type": "run", "id": 1, "argv": [PYTHON, "x"], "env": {}},
                    {"type": "run", "id": "p", "argv": [PYTHON], "env": {}},
                    {"type": "run", "id": "p", "argv": [PYTHON, 3], "env": {}},
                    {"type": "run", "id": "p", "argv": [PYTHON, "x"], "env": {"A": 1}},
                    {"type": "run", "id": "p", "argv": [PYTHON, "x"], "env": {}, "cwd": 5}]:
            with self.subTest(msg=msg):
                rt = Runtime(env=base_env())
                try:
                    rt.send(msg)
                    self.assertEqual(rt.wait_exit(), 2)
                finally:
                    rt.close()


if __name__ == "__main__":
    unittest.main()


class PooledProgramModeTest(ProgramModeTest):
    """The same programs on a runtime started as a template's child is
    (main(cells=True)): what executions need is set up before its hello,
    and a program run must take all of it away again."""

    runtime_argv = [PYTHON, "-I", "-B", "-c",
                    f"import sys; sys.path.insert(0, {RUNTIME_DIR!r}); import airlock_runtime; "
                    "airlock_runtime.main(cells=True)"]

    def test_program_run_imports_no_session_modules(self) -> None:
        # A template's child has every module of the runtime loaded; what
        # it set up for cells (the IPython stand-in) is gone for a program.
        probe = "import sys\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'IPython'))\n"
        bare = subprocess.run([PYTHON, "-I", "-c", probe], capture_output=True, timeout=60, check=True).stdout
        out, _, code = self.via_runtime(self.write(probe), [], program_env())
        self.assertEqual((out, code), (bare, 0))


class LeanProgramModeTest(ProgramModeTest):
    """The same programs on a runtime started without site (python3 -S) and
    as a file (no runpy), as one started for a lean program run alone is
    (runtimes.Language.LeanProgram): the runtime gives the program what
    site would have given it that it can see."""

    runtime_argv = [PYTHON, "-I", "-S", "-B", os.path.join(RUNTIME, "__main__.py")]

    def test_program_run_imports_no_session_modules(self) -> None:
        # Started without site, a program run loads no more of these than a
        # bare python3 -S does: not runpy (the runtime starts as a file),
        # not importlib (and warnings) or types, which the runtime needs
        # only for what it does without them.
        probe = ("import sys\nprint(sorted(m for m in ('ast', 'enum', 'importlib', 'json', 'linecache', 're', "
                 "'runpy', 'tokenize', 'types', 'typing', 'warnings') if m in sys.modules))\n")
        bare = subprocess.run([PYTHON, "-I", "-S", "-c", probe], capture_output=True, timeout=60, check=True).stdout
        # A configure without PYTHONPATH, as a program run's is (one the
        # client gave runs in a new interpreter).
        self.runtime_env = {"PYTHONPATH": ""}
        out, _, code = self.via_runtime(self.write(probe), [], program_env())
        self.assertEqual((out, code), (bare, 0))
