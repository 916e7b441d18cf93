"""IPython-style conveniences: !shell, %magics, %%cell magics, top-level await."""

from __future__ import annotations

import os
import sys
import tempfile
import unittest

import harness
from harness import SessionMixin

sys.path.insert(0, harness.RUNTIME_DIR)
import airlock_runtime  # noqa: E402
from airlock_runtime import transform_cell  # noqa: E402


class TransformTest(unittest.TestCase):
    """The source transform, in process."""

    def test_plain_python_is_untouched(self) -> None:
        for code in ["x = 1", "a = b % c", "x != y", "s = '%d' % 3", "if x:\n    pass"]:
            self.assertEqual(transform_cell(code), (code, set()))

    def test_shell_lines(self) -> None:
        self.assertEqual(transform_cell("!ls -la\nx = 1"),
                         ("__airlock__.system('ls -la')\nx = 1", {1}))
        self.assertEqual(transform_cell("for f in fs:\n    !echo {f}\n"),
                         ("for f in fs:\n    __airlock__.system('echo {f}')\n", {2}))
        self.assertEqual(transform_cell("files = !ls\n"), ("files = __airlock__.getoutput('ls')\n", {1}))
        self.assertEqual(transform_cell("!!date"), ("__airlock__.getoutput('date')", {1}))

    def test_line_magics(self) -> None:
        self.assertEqual(transform_cell("%cd /tmp"), ("__airlock__.line_magic('cd', '/tmp')", {1}))
        self.assertEqual(transform_cell("t = %timeit -o f()"),
                         ("t = __airlock__.line_magic('timeit', '-o f()')", {1}))
        self.assertEqual(transform_cell("cd ..\npip install numpy"),
                         ("__airlock__.line_magic('cd', '..')\n__airlock__.line_magic('pip', 'install numpy')",
                          {1, 2}))

    def test_cell_magic(self) -> None:
        src, lines = transform_cell("\n%%writefile a.txt\nline 1\nline 2\n")
        self.assertEqual(src, "\n__airlock__.cell_magic('writefile', 'a.txt', 'line 1\\nline 2\\n', 3)\n")
        self.assertEqual(lines, {2})

    def test_magic_syntax_inside_strings_and_expressions(self) -> None:
        for code in ['s = """\n%not a magic\n!not shell\n"""', "x = (1\n%2)", "s = 'a\\\n!b'",
                     "y = [\n    !1,\n]", "z = 1 \\\n% 2"]:
            self.assertEqual(transform_cell(code), (code, set()), code)

    def test_carriage_returns(self) -> None:
        self.assertEqual(transform_cell("!echo a\r\nx = 1\r\n"),
                         ("__airlock__.system('echo a')\r\nx = 1\r\n", {1}))

    def test_one_table_of_every_family(self) -> None:
        # The families (IPython's core/magics layout) share one table: the
        # names listed are those the single class had before the split.
        m = airlock_runtime.magics.Magics(None)
        self.assertEqual(m.available("line"),
                         "%autoreload, %cat, %cd, %config, %cp, %env, %ll, %load_ext, %ls, %lsmagic, "
                         "%matplotlib, %mkdir, %mv, %pip, %pwd, %reset, %rm, %rmdir, %run, %time, "
                         "%timeit, %who, %whos, %xmode")
        self.assertEqual(m.available("cell"),
                         "%%bash, %%capture, %%html, %%javascript, %%latex, %%markdown, %%python, "
                         "%%python3, %%script, %%sh, %%svg, %%time, %%timeit, %%writefile")
        # Aliases call their magic, unlisted.
        for kind, alias, name in [("line", "set_env", "env"), ("line", "conda", "pip"), ("line", "mamba", "pip"),
                                  ("line", "reload_ext", "load_ext"), ("line", "unload_ext", "load_ext"),
                                  ("line", "aimport", "autoreload"), ("cell", "file", "writefile"),
                                  ("cell", "HTML", "html"), ("cell", "md", "markdown"),
                                  ("cell", "js", "javascript"), ("cell", "python", "python3")]:
            self.assertEqual(m.magics[kind][alias], m.magics[kind][name], alias)
        self.assertNotIn("%system", m.available("line"))
        self.assertIn("system", m.magics["line"])
        self.assertIn("sx", m.magics["line"])

    def test_import_has_no_side_effects(self) -> None:
        # This process imported airlock_runtime above: nothing of it may show.
        self.assertIsNone(airlock_runtime._session)
        import builtins
        self.assertFalse(hasattr(builtins, "display"))
        self.assertFalse(hasattr(builtins, "__airlock__"))
        import signal
        self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)
        self.assertNotEqual(type(sys.stdout).__module__, "airlock_runtime")
        self.assertNotIn("IPython", sys.modules)


class ShellTest(SessionMixin, unittest.TestCase):
    def test_echo(self) -> None:
        ex = self.ok("print('before')\n!echo hi\nprint('after')")
        self.assertEqual(ex.out, "before\nhi\nafter\n")

    def test_stderr_and_exit_code(self) -> None:
        ex = self.ok("!echo oops >&2; exit 3\n_exit_code")
        self.assertEqual(ex.err, "oops\n")
        self.assertEqual(ex.text, "3")

    def test_expansion(self) -> None:
        ex = self.ok("name = 'world'\nn = 2\n!echo hello {name} {n * 21} $name '$$NOT_EXPANDED' {{braces}}")
        self.assertEqual(ex.out, "hello world 42 world $NOT_EXPANDED {braces}\n")
        ex = self.ok("!echo '{print $1}' | awk '{print $1}'")  # failed expansion: unchanged
        self.assertEqual(ex.out, "{print\n")
        ex = self.ok("!echo $HOME_IS_NOT_A_PYTHON_NAME-x")
        self.assertEqual(ex.out, "-x\n")

    def test_capture_output(self) -> None:
        ex = self.ok("lines = !printf 'a b\\nc\\n'\n(lines, lines.s, lines.n)")
        self.assertEqual(ex.text, "(['a b', 'c'], 'a b c', 'a b\\nc')")

    def test_indented_shell_line(self) -> None:
        ex = self.ok("for i in range(2):\n    !echo n{i}")
        self.assertEqual(ex.out, "n0\nn1\n")

    def test_pip_install_asks_the_server(self) -> None:
        # Every spelling sends one install message with the plain specs;
        # the harness answers as a server without an index does.
        for code, pkgs in [("!pip install -q requests-nonexistent-pkg", ["requests-nonexistent-pkg"]),
                           ("%pip install --upgrade numpy", ["numpy"]),
                           ("!python3 -m pip install somepkg==1.0", ["somepkg==1.0"]),
                           ("!pip3 install 'a[x]>=2' b", ["a[x]>=2", "b"]),
                           ("pip install x", ["x"])]:
            ex = self.failing(code, "PackageInstallError")
            self.assertEqual([m["packages"] for m in ex.installs], [pkgs], code)
            self.assertEqual(ex.installs[0]["manager"], "pip")
            self.assertIn("package installation is not configured on this server (packages.pip.index_url)",
                          ex.error["value"])
        # The server's other refusals are raised as they come.
        self.rt.on_install = lambda m: {"error": "permission denied: package evil is not allowed by the server's policy (packages.pip.allow)"}
        try:
            ex = self.failing("%pip install evil", "PackageInstallError")
            self.assertIn("not allowed by the server's policy", ex.error["value"])
        finally:
            self.rt.on_install = None
        # Options that point pip elsewhere are refused here, nothing is sent.
        for code in ["%pip install -r requirements.txt", "!pip install --index-url http://x/ y", "%pip install"]:
            ex = self.failing(code, "PackageInstallError")
            self.assertEqual(ex.installs, [], code)
        # Other subcommands run as before.
        ex = self.ok("!pip download x")
        self.assertIn("no network access", ex.err)
        self.assertEqual(ex.installs, [])
        # After the server's download, this process installs offline and
        # removes the wheels (none here: pip fails, clearly).
        if harness.has_module("pip"):
            wheels = tempfile.mkdtemp()
            self.rt.on_install = lambda m: {"wheels": wheels}
            try:
                ex = self.failing("%pip install nothing-here", "PackageInstallError")
                self.assertIn("failed (exit status", ex.error["value"])
                self.assertFalse(os.path.exists(wheels))
            finally:
                self.rt.on_install = None

    def test_system_magic_is_the_shell_line(self) -> None:
        # %system and !cmd were two paths that disagreed: only ! sent pip
        # install to the server. Both are one magic now.
        ex = self.failing("%system pip install some-pkg", "PackageInstallError")
        self.assertEqual([m["packages"] for m in ex.installs], [["some-pkg"]])
        ex = self.ok("name = 'x'\n%system echo {name} $name")
        self.assertEqual(ex.out, "x x\n")
        self.assertEqual(self.value("%sx echo a; echo b"), "['a', 'b']")

    def test_pip_list(self) -> None:
        ex = self.ok("%pip list")
        self.assertIn("Package", ex.out)


class MagicTest(SessionMixin, unittest.TestCase):
    def test_cd_and_pwd(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            real = os.path.realpath(d)
            ex = self.ok(f"%cd {d}")
            self.assertEqual(ex.out, real + "\n")
            self.assertEqual(self.value("%pwd"), repr(real))
            self.assertEqual(self.value("import os\nos.getcwd()"), repr(real))
            self.assertEqual(self.ok("!pwd").out, real + "\n")
            os.mkdir(os.path.join(d, "sub dir"))
            self.ok("%cd 'sub dir'")
            self.ok("cd ..")
            self.assertEqual(self.value("%pwd"), repr(real))
            self.ok("%cd -")
            self.assertEqual(self.value("%pwd"), repr(os.path.join(real, "sub dir")))
            self.ok("%cd /")
        self.failing("%cd /nonexistent-dir", "FileNotFoundError")

    def test_env(self) -> None:
        ex = self.ok("%env AIRLOCK_TEST_VAR=some value")
        self.assertEqual(ex.out, "env: AIRLOCK_TEST_VAR=some value\n")
        self.assertEqual(self.value("%env AIRLOCK_TEST_VAR"), "'some value'")
        self.assertEqual(self.ok("!echo $AIRLOCK_TEST_VAR").out, "some value\n")
        self.assertEqual(self.value("import os\n%env OTHER 1\nos.environ['OTHER']"), "'1'")
        env = self.ok("e = %env\ntype(e).__name__, 'AIRLOCK_TEST_VAR' in e").text
        self.assertEqual(env, "('dict', True)")

    def test_time(self) -> None:
        ex = self.ok("%time total = sum(range(1000))\ntotal")
        self.assertIn("CPU times: user", ex.out)
        self.assertIn("Wall time:", ex.out)
        self.assertEqual(ex.text, "499500")
        ex = self.ok("%time 6 * 7")
        self.assertEqual(ex.text, "42")

    def test_timeit(self) -> None:
        ex = self.ok("%timeit -n 100 -r 3 x = 1 + 1")
        self.assertRegex(ex.out, r"per loop \(mean \u00b1 std\. dev\. of 3 runs, 100 loops each\)")
        ex = self.ok("%timeit sum(range(10))")
        self.assertIn("per loop", ex.out)
        ex = self.ok("r = %timeit -o -q -n 5 -r 2 pass\n(r.loops, r.repeat)")
        self.assertEqual(ex.text, "(5, 2)")

    def test_unknown_magic(self) -> None:
        ex = self.failing("x = 1\n%nonexistent_magic arg", "UsageError")
        self.assertIn("%nonexistent_magic", ex.error["value"])
        self.assertIn("%cd", ex.error["value"])
        ex = self.failing("%%nonexistent_cell\nbody", "UsageError")
        self.assertEqual(self.value("'ok'"), "'ok'")

    def test_tolerated_notebook_magics(self) -> None:
        ex = self.ok("%matplotlib inline\n%config InlineBackend.figure_format = 'retina'\n1")
        self.assertEqual(ex.text, "1")
        self.assertEqual(ex.err, "")

    def test_who_and_reset(self) -> None:
        self.ok("%reset -f\nalpha = 1\nbeta = 'b'")
        self.assertEqual(self.ok("%who").out, "alpha\tbeta\n")
        self.assertIn("alpha", self.ok("%whos").out)
        self.ok("%reset -f")
        self.failing("alpha", "NameError")
        self.assertEqual(self.value("__name__"), "'__main__'")

    def test_writefile_and_run(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "script.py")
            ex = self.ok(f"%%writefile {path}\nimport sys\nRESULT = sys.argv[1:]\n"
                         "if __name__ == '__main__':\n    print('ran as main')\n")
            self.assertEqual(ex.out, f"Writing {path}\n")
            ex = self.ok(f"%%writefile -a {path}\nEXTRA = 1\n")
            self.assertEqual(ex.out, f"Appending to {path}\n")
            ex = self.ok(f"%run {path} one two\nRESULT, EXTRA")
            self.assertEqual(ex.out, "ran as main\n")
            self.assertEqual(ex.text, "(['one', 'two'], 1)")

    def test_bash_cell(self) -> None:
        ex = self.ok("%%bash\nfor i in 1 2; do echo line$i; done\necho err >&2")
        self.assertEqual(ex.out, "line1\nline2\n")
        self.assertEqual(ex.err, "err\n")
        ex = self.failing("%%bash\nexit 4", "CalledProcessError")

    def test_time_cell(self) -> None:
        ex = self.ok("%%time\nsquares = [i * i for i in range(10)]\nsum(squares)")
        self.assertIn("Wall time", ex.out)
        self.assertEqual(ex.text, "285")

    def test_error_line_numbers_in_cell_magic(self) -> None:
        ex = self.failing("%%time\nx = 1\nraise ValueError('line 3')", "ValueError")
        n = ex.done["execution_count"]
        self.assertIn(f"  Cell In[{n}], line 3", ex.error["traceback"])
        self.assertIn("    raise ValueError('line 3')", ex.error["traceback"])

    def test_capture_cell(self) -> None:
        ex = self.ok("%%capture cap\nprint('hidden')\ndisplay('also hidden')")
        self.assertEqual(ex.out, "")
        self.assertEqual(ex.displays, [])
        self.assertEqual(self.value("cap.stdout"), "'hidden\\n'")
        ex = self.ok("cap.show()")
        self.assertEqual(ex.out, "hidden\n")
        self.assertEqual(len(ex.displays), 1)

    def test_html_cell(self) -> None:
        ex = self.ok("%%html\n<b>hi</b>")
        self.assertEqual(ex.displays[0]["data"]["text/html"], "<b>hi</b>")

    def test_traceback_on_magic_line(self) -> None:
        ex = self.failing("x = 1\n%cd /nonexistent-dir-2", "FileNotFoundError")
        n = ex.done["execution_count"]
        tb = ex.error["traceback"]
        self.assertIn(f"  Cell In[{n}], line 2", tb)
        self.assertIn("    %cd /nonexistent-dir-2", tb)
        self.assertFalse(any(set(line.strip()) <= {"^", "~"} and line.strip() for line in tb), tb)


class AwaitTest(SessionMixin, unittest.TestCase):
    def test_top_level_await(self) -> None:
        self.assertEqual(self.value("import asyncio\nawait asyncio.sleep(0.01)\n42"), "42")
        self.ok("async def twice(x):\n    await asyncio.sleep(0)\n    return 2 * x")
        self.assertEqual(self.value("await twice(21)"), "42")
        self.assertEqual(self.value("r = [await twice(i) for i in range(3)]\nr"), "[0, 2, 4]")
        self.assertEqual(self.value("async with asyncio.timeout(5):\n    v = await twice(1)\nv"), "2")

    def test_tasks_survive_between_cells(self) -> None:
        self.ok("import asyncio\nq = asyncio.Queue()\nasync def producer():\n    await q.put('item')\n"
                "task = asyncio.ensure_future(producer())")
        self.assertEqual(self.value("await q.get()"), "'item'")

    def test_asyncio_run_in_plain_cell(self) -> None:
        self.assertEqual(self.value("import asyncio\nasync def f():\n    return 'ran'\nasyncio.run(f())"), "'ran'")

    def test_exception_in_awaited_code(self) -> None:
        ex = self.failing("import asyncio\nasync def bad():\n    await asyncio.sleep(0)\n    raise KeyError('k')\n"
                          "await bad()", "KeyError")
        n = ex.done["execution_count"]
        tb = ex.error["traceback"]
        self.assertEqual(tb[1], f"  Cell In[{n}], line 5")  # no asyncio frames before the cell
        self.assertIn(f"  Cell In[{n}], line 4, in bad", tb)


if __name__ == "__main__":
    unittest.main()
