"""Rich output: MIME bundles, display(), IPython.display, pandas and matplotlib."""

from __future__ import annotations

import base64
import os
import tempfile
import unittest

import harness
from harness import Runtime, SessionMixin, png_bytes, tiny_png

HAS_PANDAS = harness.has_module("pandas")
HAS_MPL = harness.has_module("matplotlib")


class RealIPythonTest(SessionMixin, unittest.TestCase):
    """IPython's own display() prints repr() outside a shell; the runtime
    routes it to airlock's, whether IPython is installed (the real one,
    or a stand-in of its layout here) or not (the runtime's shim)."""

    def test_fake_ipython_layout_is_routed(self) -> None:
        # A package laid out like IPython >= 7.23, whose display() behaves
        # as IPython's does without a shell: it prints repr().
        with tempfile.TemporaryDirectory() as d:
            pkg = os.path.join(d, "IPython")
            os.makedirs(os.path.join(pkg, "core"))
            files = {
                "__init__.py": "from .core.display_functions import display\ndef get_ipython():\n    return None\n",
                "core/__init__.py": "",
                "core/display_functions.py": (
                    "def display(*objs, **kw):\n    print(*objs)\n"
                    "def publish_display_data(data, metadata=None, **kw):\n    print('unpublished', data)\n"
                    "def clear_output(wait=False):\n    print('\\033[2K', end='')\n"
                    "def update_display(obj, *, display_id, **kw):\n    print(obj)\n"),
                "core/display.py": (
                    "from .display_functions import display, publish_display_data\n"
                    "class HTML:\n    def __init__(self, data):\n        self.data = data\n"
                    "    def _repr_html_(self):\n        return self.data\n"),
                "display.py": "from .core.display_functions import *\nfrom .core.display import *\n",
            }
            for name, text in files.items():
                with open(os.path.join(pkg, name), "w") as f:
                    f.write(text)
            ex = self.ok(f"import sys\nsys.path.insert(0, {d!r})\nfor m in [m for m in sys.modules if m.startswith('IPython')]:\n"
                         "    del sys.modules[m]\n"
                         "import importlib\nimportlib.invalidate_caches()\n"
                         "from airlock_runtime import display as d\nd.route_real_ipython()\n"
                         "from IPython.display import display, HTML, publish_display_data\n"
                         "display(HTML('<b>real</b>'))\n"
                         "publish_display_data({'text/plain': 'raw'})\n"
                         "import IPython.core.display_functions as f\nprint(f.display is d.display)")
            self.assertEqual(ex.out, "True\n")
            self.assertEqual(ex.displays[0]["data"]["text/html"], "<b>real</b>")
            self.assertEqual(ex.displays[1]["data"], {"text/plain": "raw"})


class IPythonOnSessionPathTest(unittest.TestCase):
    """An IPython on the PYTHONPATH the session's configure sets is the
    one cells import, whether the runtime set up for cells before that
    configure (a template's child, waiting in its pool) or not."""

    def test_configured_path_decides(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "IPython"))
            with open(os.path.join(d, "IPython", "__init__.py"), "w") as f:
                f.write("__version__ = 'on-the-path'\n")
            pooled = [harness.PYTHON, "-I", "-B", "-c",
                      f"import sys; sys.path.insert(0, {harness.RUNTIME_DIR!r}); import airlock_runtime; "
                      "airlock_runtime.main(cells=True)"]
            for argv in (None, pooled):
                with self.subTest(pooled=argv is not None):
                    rt = Runtime(argv=argv, configure=False)
                    try:
                        rt.configure(env=harness.base_env(PYTHONPATH=d), cwd=d)
                        ex = rt.execute("import IPython\nIPython.__version__")
                        self.assertEqual(ex.text, repr("on-the-path"), (ex.messages, ex.err))
                    finally:
                        rt.close()


class MimeBundleTest(SessionMixin, unittest.TestCase):
    def test_repr_methods(self) -> None:
        png = tiny_png()
        self.ok(f"""
class Rich:
    def _repr_html_(self): return '<b>html</b>'
    def _repr_markdown_(self): return '**md**'
    def _repr_svg_(self): return '<svg xmlns="http://www.w3.org/2000/svg"></svg>'
    def _repr_png_(self): return {png!r}
    def _repr_jpeg_(self): return b'\\xff\\xd8\\xff\\xe0jpeg'
    def _repr_json_(self): return {{'k': [1, 2.5, None, True]}}
    def _repr_latex_(self): return r'$x^2$'
    def __repr__(self): return 'Rich()'
""")
        data = self.ok("Rich()").result["data"]
        self.assertEqual(data["text/plain"], "Rich()")
        self.assertEqual(data["text/html"], "<b>html</b>")
        self.assertEqual(data["text/markdown"], "**md**")
        self.assertTrue(data["image/svg+xml"].startswith("<svg"))
        self.assertEqual(png_bytes(data["image/png"]), png)
        self.assertEqual(base64.b64decode(data["image/jpeg"]), b"\xff\xd8\xff\xe0jpeg")
        self.assertEqual(data["application/json"], {"k": [1, 2.5, None, True]})
        self.assertEqual(data["text/latex"], "$x^2$")

    def test_repr_mimebundle_and_metadata(self) -> None:
        self.ok("""
class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {'text/plain': 'plain', 'application/vnd.custom+json': {'a': 1}}, {'text/plain': {'m': 1}}
    def _repr_html_(self): return '<i>also</i>'
""")
        r = self.ok("Bundle()").result
        self.assertEqual(r["data"], {"text/plain": "plain", "application/vnd.custom+json": {"a": 1},
                                     "text/html": "<i>also</i>"})
        self.assertEqual(r["metadata"], {"text/plain": {"m": 1}})

    def test_per_format_metadata_from_tuple(self) -> None:
        self.ok("class T:\n    def _repr_html_(self):\n        return '<p>x</p>', {'isolated': True}")
        r = self.ok("T()").result
        self.assertEqual(r["metadata"], {"text/html": {"isolated": True}})

    def test_failing_repr_falls_back(self) -> None:
        ex = self.ok("class Bad:\n    def __repr__(self):\n        raise ValueError('no repr')\nBad()")
        self.assertRegex(ex.text, r"<__main__\.Bad object at 0x[0-9a-f]+>")
        self.assertIn("no repr", ex.err)

    def test_failing_rich_repr_keeps_other_formats(self) -> None:
        ex = self.ok("class Half:\n    def _repr_html_(self):\n        1/0\n"
                     "    def _repr_markdown_(self):\n        return 'md'\n    def __repr__(self):\n        return 'half'\nHalf()")
        self.assertEqual(ex.result["data"], {"text/plain": "half", "text/markdown": "md"})
        self.assertIn("ZeroDivisionError", ex.err)

    def test_invalid_rich_values_are_dropped(self) -> None:
        ex = self.ok("class Odd:\n    def _repr_json_(self):\n        return {'nan': float('nan')}\n"
                     "    def _repr_png_(self):\n        return 12\n    def __repr__(self):\n        return 'odd'\nOdd()")
        data = ex.result["data"]
        self.assertNotIn("application/json", data)
        self.assertNotIn("image/png", data)
        self.assertTrue(data["text/plain"].startswith("odd"))

    def test_objects_answering_every_attribute(self) -> None:
        ex = self.ok("class Anything:\n    def __getattr__(self, name):\n        return lambda *a, **k: '<b>fake</b>'\n"
                     "    def __repr__(self):\n        return 'anything'\nAnything()")
        self.assertEqual(ex.result["data"], {"text/plain": "anything"})

    def test_classes_only_get_text(self) -> None:
        ex = self.ok("class WithHtml:\n    def _repr_html_(self):\n        return '<b/>'\nWithHtml")
        self.assertEqual(ex.result["data"], {"text/plain": "<class '__main__.WithHtml'>"})

    def test_long_containers_are_pretty_printed(self) -> None:
        text = self.value("{'key%d' % i: list(range(5)) for i in range(10)}")
        self.assertEqual(len(text.splitlines()), 10)
        self.assertEqual(self.value("[1, 2, 3]"), "[1, 2, 3]")

    def test_huge_repr_is_capped(self) -> None:
        ex = self.ok("'y' * (10 << 20)")
        text = ex.text
        self.assertLess(len(text), 5 << 20)
        self.assertIn("truncated", text)

    def test_huge_html_is_capped(self) -> None:
        ex = self.ok("class H:\n    def _repr_html_(self):\n        return '<p>' * (5 << 20)\nH()")
        self.assertLess(len(ex.result["data"]["text/html"]), (4 << 20) + 1000)
        self.assertIn("truncated", ex.result["data"]["text/html"])

    def test_invalid_mime_types_are_dropped(self) -> None:
        ex = self.ok("display({'text/plain': 'p', 'not a mime': 1, 'text/html; charset=x': '<b/>', 'a/b/c': 'x',\n"
                     "         'x' * 200 + '/y': 'long', 3: 'int key'}, raw=True)")
        data = ex.displays[0]["data"]
        self.assertEqual(list(data), ["text/plain"])
        self.assertIn("not a MIME type", data["text/plain"])

    def test_oversized_binary_is_dropped(self) -> None:
        ex = self.ok("display({'text/plain': 'big', 'image/png': 'A' * (33 << 20)}, raw=True)")
        self.assertEqual(len(ex.displays), 1)
        data = ex.displays[0]["data"]
        self.assertNotIn("image/png", data)
        self.assertIn("dropped image/png", data["text/plain"])


class DisplayTest(SessionMixin, unittest.TestCase):
    def test_display_builtin(self) -> None:
        ex = self.ok("display(1, 'two')\ndisplay({'a': 1})")
        self.assertEqual([d["data"] for d in ex.displays],
                         [{"text/plain": "1"}, {"text/plain": "'two'"}, {"text/plain": "{'a': 1}"}])
        self.assertIsNone(ex.result)

    def test_display_raw_include_exclude_metadata(self) -> None:
        ex = self.ok("display({'text/plain': 'p', 'text/html': '<p>h</p>'}, raw=True)")
        self.assertEqual(ex.displays[0]["data"], {"text/plain": "p", "text/html": "<p>h</p>"})
        self.ok("class Two:\n    def _repr_html_(self): return '<b>2</b>'\n    def __repr__(self): return 'two'")
        ex = self.ok("display(Two(), include=['text/html'])\ndisplay(Two(), exclude=['text/html'])\n"
                     "display(Two(), metadata={'text/html': {'x': 1}})")
        self.assertEqual([d["data"] for d in ex.displays],
                         [{"text/html": "<b>2</b>"}, {"text/plain": "two"},
                          {"text/plain": "two", "text/html": "<b>2</b>"}])
        self.assertEqual(ex.displays[2]["metadata"], {"text/html": {"x": 1}})

    def test_ipython_display_classes(self) -> None:
        png = tiny_png()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "pic.png")
            with open(path, "wb") as f:
                f.write(png)
            ex = self.ok(f"""
from IPython.display import display, HTML, Markdown, Latex, Math, SVG, JSON, Image, Pretty, Code
display(HTML('<b>bold</b>'))
display(Markdown('# title'))
display(Latex(r'$\\alpha$'))
display(Math(r'\\beta'))
display(SVG('<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"/>'))
display(JSON({{'a': [1, 2]}}))
display(Image(data={png!r}))
display(Image(filename={path!r}))
display(Image({path!r}, width=10))
display(Pretty('pretty'))
display(Code('x = 1', language='python'))
""")
        data = [d["data"] for d in ex.displays]
        self.assertEqual(len(data), 11)
        self.assertEqual(data[0], {"text/html": "<b>bold</b>", "text/plain": "<IPython.core.display.HTML object>"})
        self.assertEqual(data[1]["text/markdown"], "# title")
        self.assertEqual(data[2]["text/latex"], "$\\alpha$")
        self.assertEqual(data[3]["text/latex"], "$\\displaystyle \\beta$")
        self.assertEqual(data[4]["image/svg+xml"], '<svg xmlns="http://www.w3.org/2000/svg"/>')
        self.assertEqual(data[5]["application/json"], {"a": [1, 2]})
        self.assertEqual(ex.displays[5]["metadata"], {"application/json": {"expanded": False, "root": "root"}})
        for i in (6, 7, 8):
            self.assertEqual(png_bytes(data[i]["image/png"]), png)
            self.assertNotIn("image/jpeg", data[i])
        self.assertEqual(ex.displays[8]["metadata"], {"image/png": {"width": 10}})
        self.assertEqual(data[9], {"text/plain": "pretty"})
        self.assertEqual(data[10]["text/plain"], "x = 1")

    def test_image_jpeg_and_url(self) -> None:
        ex = self.ok("from IPython.display import Image\n"
                     "display(Image(data=b'\\xff\\xd8\\xff\\xe0rest'))\n"
                     "display(Image(url='https://example.com/a.png'))")
        self.assertEqual(base64.b64decode(ex.displays[0]["data"]["image/jpeg"]), b"\xff\xd8\xff\xe0rest")
        self.assertEqual(ex.displays[1]["data"]["text/html"], '<img src="https://example.com/a.png"/>')
        ex = self.rt.execute("from IPython.display import Image\nImage(data=b'not an image')")
        if harness.REAL_IPYTHON:
            self.assertIsNone(ex.error)  # IPython takes it as PNG
        else:
            self.assertEqual(ex.error["name"], "ValueError")

    def test_ipython_module_layout(self) -> None:
        ex = self.ok("import IPython\nfrom IPython import display as d\nfrom IPython.core.display import HTML\n"
                     "import IPython.display\nimport importlib.util\n"
                     "print(IPython.get_ipython() is None, d is IPython.display, HTML is d.HTML,\n"
                     "      importlib.util.find_spec('IPython') is not None)\n"
                     "d.display(d.Markdown('*x*'))\nd.clear_output()\nd.display_html('<p>raw</p>', raw=True)")
        self.assertEqual(ex.out, "True True True True\n")
        self.assertEqual(ex.displays[0]["data"]["text/markdown"], "*x*")
        self.assertEqual(ex.displays[1]["data"], {"text/html": "<p>raw</p>"})

    def test_display_handle(self) -> None:
        ex = self.ok("h = display('a', display_id=True)\nh.update('b')\ntype(h).__name__")
        self.assertEqual([d["data"]["text/plain"] for d in ex.displays], ["'a'", "'b'"])
        self.assertEqual(ex.text, "'DisplayHandle'")

    def test_display_from_thread_after_done_is_dropped(self) -> None:
        self.ok("import threading, time\n"
                "threading.Thread(target=lambda: (time.sleep(0.3), display('late'))).start()")
        import time
        time.sleep(0.6)
        ex = self.ok("'next'")  # the harness rejects messages for other ids
        self.assertEqual(ex.displays, [])

    def test_display_from_thread_during_execution(self) -> None:
        ex = self.ok("import threading\nt = threading.Thread(target=display, args=('from thread',))\n"
                     "t.start(); t.join()")
        self.assertEqual(ex.displays[0]["data"]["text/plain"], "'from thread'")


@unittest.skipUnless(HAS_PANDAS, "pandas is not installed")
class PandasTest(SessionMixin, unittest.TestCase):
    def test_dataframe_result(self) -> None:
        ex = self.ok("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})\ndf")
        data = ex.result["data"]
        self.assertIn("<table", data["text/html"])
        self.assertIn("a  b", data["text/plain"])
        ex = self.ok("display(df)\ndf['a']")
        self.assertIn("text/html", ex.displays[0]["data"])
        self.assertIn("Name: a", ex.text)


@unittest.skipUnless(HAS_MPL, "matplotlib is not installed")
class MatplotlibTest(SessionMixin, unittest.TestCase):
    def assertFigure(self, data: dict, axes: int = 1) -> None:
        self.assertEqual(data["text/plain"], f"<Figure size 640x480 with {axes} Axes>")
        self.assertTrue(png_bytes(data["image/png"]).startswith(b"\x89PNG\r\n\x1a\n"))

    def test_backend(self) -> None:
        self.assertEqual(self.value("import matplotlib\nmatplotlib.get_backend()"), "'module://airlock_mpl'")

    def test_figure_without_show(self) -> None:
        ex = self.ok("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]);")
        self.assertEqual(len(ex.displays), 1)
        self.assertFigure(ex.displays[0]["data"])
        self.assertIsNone(ex.result)
        # Shown figures are closed: nothing comes back next time.
        ex = self.ok("len(plt.get_fignums())")
        self.assertEqual(ex.displays, [])
        self.assertEqual(ex.text, "0")

    def test_figure_with_show(self) -> None:
        ex = self.ok("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nprint(len(plt.get_fignums()))")
        self.assertEqual(len(ex.displays), 1)
        self.assertFigure(ex.displays[0]["data"])
        self.assertEqual(ex.out, "0\n")

    def test_several_figures_in_order(self) -> None:
        ex = self.ok("import matplotlib.pyplot as plt\nfor n in (1, 2, 3):\n"
                     "    fig, axes = plt.subplots(1, n)\n")
        self.assertEqual([d["data"]["text/plain"] for d in ex.displays],
                         [f"<Figure size 640x480 with {n} Axes>" for n in (1, 2, 3)])

    def test_show_in_loop(self) -> None:
        ex = self.ok("import matplotlib.pyplot as plt\nfor i in range(2):\n    plt.plot([i, 1])\n    plt.show()")
        self.assertEqual(len(ex.displays), 2)

    def test_figure_as_result_is_not_duplicated(self) -> None:
        ex = self.ok("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])\nfig")
        self.assertEqual(ex.displays, [])
        self.assertFigure(ex.result["data"])

    def test_display_figure_is_not_duplicated_unless_changed(self) -> None:
        ex = self.ok("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])\ndisplay(fig)")
        self.assertEqual(len(ex.displays), 1)
        ex = self.ok("fig, ax = plt.subplots()\ndisplay(fig)\nax.plot([1, 2]);")
        self.assertEqual(len(ex.displays), 2)  # changed after display(): shown again at the end

    def test_figure_outside_pyplot(self) -> None:
        ex = self.ok("from matplotlib.figure import Figure\nf = Figure()\nf.add_subplot().plot([1])\nf")
        self.assertFigure(ex.result["data"])

    def test_figure_and_error(self) -> None:
        ex = self.rt.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2])\n1/0")
        self.assertEqual(ex.status, "error")
        self.assertEqual(len(ex.displays), 1)

    def test_rendering_error_is_reported_and_figures_closed(self) -> None:
        ex = self.rt.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.title(r'$\\frac{$')")
        self.assertEqual(ex.status, "error", ex.messages)
        ex = self.ok("len(plt.get_fignums())")
        self.assertEqual(ex.text, "0")

    def test_pandas_plot(self) -> None:
        if not HAS_PANDAS:
            self.skipTest("pandas is not installed")
        ex = self.ok("import pandas as pd\npd.Series([1, 3, 2]).plot()")
        self.assertEqual(len(ex.displays), 1)
        self.assertFigure(ex.displays[0]["data"])
        self.assertIn("AxesSubplot", ex.text)


@unittest.skipUnless(HAS_MPL, "matplotlib is not installed")
class MatplotlibOtherBackendTest(unittest.TestCase):
    def test_figures_flushed_even_with_plain_agg(self) -> None:
        env = harness.base_env()
        del env["MPLBACKEND"]
        rt = Runtime(env=env)
        try:
            ex = rt.execute("import matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n"
                            "plt.plot([1, 2])\nmatplotlib.get_backend()")
            self.assertEqual(ex.status, "ok", ex.messages)
            self.assertEqual(ex.text, "'agg'")
            self.assertEqual(len(ex.displays), 1)
            self.assertTrue(png_bytes(ex.displays[0]["data"]["image/png"]).startswith(b"\x89PNG"))
        finally:
            rt.close()


if __name__ == "__main__":
    unittest.main()
