"""The zygote way: import the runtime and the heavy libraries, fork, serve() in the child."""

from __future__ import annotations

import unittest

import harness
from harness import PYTHON, Runtime, png_bytes

ZYGOTE = r"""
import os, signal, sys
sys.path.insert(0, {runtime_dir!r})
import airlock_runtime                      # must have no side effects
import numpy, pandas
import matplotlib.pyplot as plt
# As airlock_zygote does before it forks: a throwaway session whose names,
# values, cells and execution count no session may see.
airlock_runtime.session.rehearse(["import numpy, pandas", "rehearsed = [1, 2]", "sum(rehearsed)", "x = 1", "x"])
import airlock_zygote                       # its code packed, as airlock_zygote's configure does
airlock_zygote.pack_code(lambda: airlock_runtime.session.rehearse(
    ["import pandas as pd", "pd.DataFrame({{'a': [1, 2]}}).sum()", "pd.DataFrame({{'a': [1, 2]}})"]))
plt.figure(); plt.plot([1, 2])              # an open figure and a loaded backend in the template
sys.stdout.write("zygote output must not leak\n")  # buffered, never flushed before the fork
signal.signal(signal.SIGINT, signal.SIG_IGN)  # the template itself ignores interrupts
pid = os.fork()
if pid == 0:
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # airlock_zygote resets every signal
        signal.signal(sig, signal.SIG_DFL)
    if {warm!r}:                            # pool.warm_runtimes
        import airlock_zygote
        airlock_zygote.warm_child()
    airlock_runtime.main(cells=True)        # as airlock_zygote.py ends its child
os.close(3)
_, status = os.waitpid(pid, 0)
os._exit(os.waitstatus_to_exitcode(status))
"""


@unittest.skipUnless(all(map(harness.has_module, ("numpy", "pandas", "matplotlib"))),
                     "numpy, pandas and matplotlib are needed for the zygote test")
class ZygoteTest(unittest.TestCase):
    #: Whether the child runs airlock_zygote.warm_child first (pool.warm_runtimes).
    warm = False

    @classmethod
    def setUpClass(cls) -> None:
        script = ZYGOTE.format(runtime_dir=harness.RUNTIME_DIR, warm=cls.warm)
        env = harness.base_env()
        del env["PYTHONUNBUFFERED"]  # so that the template's stdout is buffered at the fork
        cls.rt = Runtime(argv=[PYTHON, "-I", "-B", "-c", script], env=env)
        cls.first = cls.rt.execute("template_names = sorted(k for k in globals() if not k.startswith('__'))\n"
                                   "import linecache\n"
                                   "first_cells = sorted(k for k in linecache.cache if k.startswith('Cell In'))")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.rt.send({"type": "shutdown"})
        cls.rt.close()

    def ok(self, code: str, **kwargs):
        ex = self.rt.execute(code, **kwargs)
        self.assertEqual(ex.status, "ok", (ex.messages, ex.err))
        return ex

    def test_shutdown_runs_atexit_in_the_child(self) -> None:
        # A session forked from the template ends as a standalone one does.
        script = ZYGOTE.format(runtime_dir=harness.RUNTIME_DIR, warm=self.warm)
        harness.check_shutdown_runs_atexit(self, Runtime(argv=[PYTHON, "-I", "-B", "-c", script]))

    def test_hello_comes_from_the_child(self) -> None:
        self.assertNotEqual(self.rt.hello["pid"], self.rt.pid)
        ex = self.ok("import os\nos.getpid()")
        self.assertEqual(ex.text, str(self.rt.hello["pid"]))

    def test_libraries_are_preloaded(self) -> None:
        ex = self.ok("import sys\nsorted(m for m in ('numpy', 'pandas', 'matplotlib.pyplot') if m in sys.modules)")
        self.assertEqual(ex.text, "['matplotlib.pyplot', 'numpy', 'pandas']")

    def test_no_leftovers_from_the_template(self) -> None:
        ex = self.first
        self.assertEqual(ex.status, "ok", ex.messages)
        self.assertEqual(ex.displays, [])  # the template's open figure was closed
        self.assertEqual(ex.out, "")  # its buffered output was discarded
        self.assertEqual((ex.err, ex.done["execution_count"]), ("", 1))
        self.assertEqual(self.ok("template_names").text, "[]")
        self.assertEqual(ex.done["execution_count"], 1)  # not the rehearsal's 6

    def test_no_leftovers_from_the_rehearsal(self) -> None:
        # Its namespace (its names, its `_`), its cells' source, its session.
        self.assertEqual(self.ok("first_cells").text, "['Cell In[1]']")
        self.assertEqual(self.rt.execute("rehearsed").error["name"], "NameError")
        self.assertEqual(self.ok("import os\n__airlock__.session.pid == os.getpid()").text, "True")

    def test_state_and_results(self) -> None:
        self.ok("import numpy as np\na = np.arange(6).reshape(2, 3)")
        self.assertEqual(self.ok("a.sum()").text, "15")

    def test_dataframe(self) -> None:
        ex = self.ok("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
        self.assertIn("<table", ex.result["data"]["text/html"])

    def test_plots(self) -> None:
        ex = self.ok("import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.show()\nplt.bar([1], [2]);")
        self.assertEqual(len(ex.displays), 2)
        for d in ex.displays:
            self.assertTrue(png_bytes(d["data"]["image/png"]).startswith(b"\x89PNG\r\n\x1a\n"))

    def test_display_and_ipython(self) -> None:
        ex = self.ok("from IPython.display import HTML\ndisplay(HTML('<i>z</i>'))")
        self.assertEqual(ex.displays[0]["data"]["text/html"], "<i>z</i>")

    def test_errors(self) -> None:
        ex = self.rt.execute("1/0")
        self.assertEqual(ex.error["name"], "ZeroDivisionError")
        self.assertFalse(any("airlock_runtime" in line for line in ex.error["traceback"]))

    def test_interrupt(self) -> None:
        ex = self.rt.execute("import time\nprint('started', flush=True)\ntime.sleep(100)",
                             interrupt_on=b"started", timeout=30)
        self.assertEqual(ex.status, "interrupted", ex.messages)
        self.assertEqual(self.ok("'after'").text, "'after'")

    def test_broken_pipe_raises_instead_of_killing(self) -> None:
        ex = self.rt.execute("import os, signal\nprint(signal.getsignal(signal.SIGPIPE) is signal.SIG_IGN)\n"
                             "r, w = os.pipe()\nos.close(r)\nos.write(w, b'x')")
        self.assertEqual(ex.out, "True\n")
        self.assertEqual(ex.error["name"], "BrokenPipeError")
        self.assertEqual(self.ok("'alive'").text, "'alive'")

    def test_pickle(self) -> None:
        self.ok("import pickle\nclass Z:\n    pass")
        self.assertEqual(self.ok("type(pickle.loads(pickle.dumps(Z()))).__name__").text, "'Z'")


class ZygoteImportsTest(unittest.TestCase):
    """What a template's child runs before it serves imports nothing: an
    import there (resource's, say) copies about 0.9 MB of the template's
    pages into every child; the template imports it once, shared."""

    # The template's own set-up; everything else may run in a child.
    TEMPLATE_ONLY = {"configure", "warm_up", "rehearse", "main"}

    def test_the_child_imports_nothing_new(self) -> None:
        import ast
        import os
        path = os.path.join(harness.RUNTIME_DIR, "airlock_zygote.py")
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        found = []
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.Lambda)) or getattr(fn, "name", "") in self.TEMPLATE_ONLY:
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [node.module or "."]
                else:
                    continue
                # The runtime package is the template's (configure imports it).
                found += [f"{getattr(fn, 'name', 'lambda')}: {n}" for n in names if n != "airlock_runtime"]
        self.assertEqual(found, [])


class FillHolesTest(unittest.TestCase):
    """The template fills its allocator's holes before it forks (see
    airlock_zygote.fill_holes): the table it reads must still parse."""

    def test_holes_are_read_and_filled(self) -> None:
        import subprocess
        script = ("import sys; sys.path.insert(0, %r)\n"
                  "import airlock_zygote as z\n"
                  "holes = z.malloc_holes()\n"
                  "filled = z.fill_holes(holes)\n"
                  "print(len(holes), sum(holes.values()), sum(map(len, filled)))") % harness.RUNTIME_DIR
        env = harness.base_env()
        env.pop("PYTHONMALLOC", None)
        out = subprocess.run([PYTHON, "-I", "-B", "-c", script], env=env, capture_output=True, text=True, check=True)
        classes, holes, filled = map(int, out.stdout.split())
        self.assertGreaterEqual(classes, 32, out.stdout)  # 512 bytes in steps of 16 (8 before 3.8)
        self.assertGreater(holes, 0)
        self.assertEqual(filled, holes)


PACK = r"""
import json, sys
sys.path.insert(0, {runtime_dir!r})
import airlock_zygote

def outer(k):
    def inner(x):
        return x + k
    return inner

add1, add2 = outer(1), outer(2)  # two functions, one code object

def ran(x, *, y=3):
    "a docstring"
    return [x, y, add1(x)]

def not_ran():
    return "cold"

class C:
    def method(self):
        return ran(1)

funcs = {{"add1": add1, "add2": add2, "ran": ran, "not_ran": not_ran, "method": C.method}}
before = {{k: f.__code__ for k, f in funcs.items()}}
n = airlock_zygote.pack_code(lambda: (C().method(), add2(5)))
after = {{k: f.__code__ for k, f in funcs.items()}}
fields = ("co_code", "co_consts", "co_names", "co_varnames", "co_freevars", "co_filename", "co_name",
          "co_qualname", "co_firstlineno", "co_linetable", "co_exceptiontable", "co_flags", "co_argcount",
          "co_kwonlyargcount", "co_stacksize")
print(json.dumps({{
    "n": n,
    "copied": sorted(k for k in before if after[k] is not before[k]),
    "same": all(getattr(after[k], a) == getattr(before[k], a) for k in before for a in fields),
    "shared": add1.__code__ is add2.__code__,
    "calls": [C().method(), add2(5), not_ran(), ran.__doc__],
}}))
"""


class PackCodeTest(unittest.TestCase):
    """airlock_zygote.pack_code gives the functions a run called fresh,
    equal copies of their code objects, packed together, and leaves the
    rest alone."""

    def test_copies_what_ran_and_nothing_else(self) -> None:
        import json
        import subprocess
        out = subprocess.run([PYTHON, "-I", "-B", "-c", PACK.format(runtime_dir=harness.RUNTIME_DIR)],
                             env=harness.base_env(), capture_output=True, text=True, check=True)
        got = json.loads(out.stdout)
        # add1 shares its code with add2, which ran; not_ran did not.
        self.assertEqual(got["copied"], ["add1", "add2", "method", "ran"], got)
        self.assertTrue(got["same"], got)  # equal copies: bytecode, constants, names, lines
        self.assertTrue(got["shared"], got)  # one copy for functions that shared a code object
        self.assertEqual(got["calls"], [[1, 3, 2], 7, "cold", "a docstring"])
        self.assertGreaterEqual(got["n"], 4)  # add1, add2, ran, C.method (and the lambda)


if __name__ == "__main__":
    unittest.main()


class WarmZygoteTest(ZygoteTest):
    """The same with the child warmed before its hello (pool.warm_runtimes):
    it leaves nothing a session could see."""

    warm = True
