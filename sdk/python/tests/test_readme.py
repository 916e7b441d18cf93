"""The agents guide's snippets (docs/guides/agents.md), run as written: the
install commands, the Python SDK example, and the LangChain tool example
(with the stub langchain_core of test_langchain); and the README's own
short Python example."""

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import support
import test_langchain


GUIDE = os.path.join("docs", "guides", "agents.md")


def blocks(section, lang):
    """The ```lang blocks of the guide's section whose heading is section."""
    with open(os.path.join(support.REPO, GUIDE), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## %s\n(.*?)(?=^## |\Z)" % re.escape(section), text, re.M | re.S)
    if not m:
        raise AssertionError("%s has no section %r" % (GUIDE, section))
    return re.findall(r"^```%s\n(.*?)^```" % lang, m.group(1), re.M | re.S)


class ReadmeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="airlock-readme-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_python_sdk_snippet(self):
        support.need_server(self)
        (code,) = blocks("Python SDK", "python")
        env = dict(os.environ, PYTHONPATH=support.SDK, PYTHONDONTWRITEBYTECODE="1")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=self.tmp,
                           timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines(), [
            "42", "360", "ZeroDivisionError division by zero", "0 4 sales.csv", "HELLO done", "not_found 404"])
        with open(os.path.join(self.tmp, "revenue.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_readme_snippet(self):
        """The README's own, shorter, Python example."""
        support.need_server(self)
        with open(os.path.join(support.REPO, "README.md"), encoding="utf-8") as f:
            text = f.read()
        m = re.search(r"^## From Python\n.*?^```python\n(.*?)^```", text, re.M | re.S)
        self.assertIsNotNone(m, "README.md has no Python example under 'From Python'")
        env = dict(os.environ, PYTHONPATH=support.SDK, PYTHONDONTWRITEBYTECODE="1")
        p = subprocess.run([sys.executable, "-c", m.group(1)], capture_output=True, text=True, env=env, cwd=self.tmp,
                           timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "42\n")

    def test_langchain_snippet(self):
        support.need_server(self)
        (code,) = blocks("LangChain tool", "python")
        self.addCleanup(test_langchain.install_stub())
        out, ns = io.StringIO(), {}
        with contextlib.redirect_stdout(out):
            exec(compile(code, GUIDE, "exec"), ns)
        self.assertEqual(out.getvalue(), "[image/png returned to the user]\n42\n")
        self.assertEqual([i["mime_type"] for i in ns["plots"]], ["image/png"])
        self.assertFalse(ns["sbx"].is_running())

    def test_install_commands(self):
        """The install block, as written, with each python3 a user may have
        first on PATH: the PATH's own (pyenv's on a developer's machine),
        Debian's, and a bare venv's (no setuptools, no wheel)."""
        (sh,) = blocks("Python SDK", "sh")
        if subprocess.run(["/usr/bin/python3", "-c", "import venv, ensurepip"], capture_output=True).returncode:
            support.skip(self, "/usr/bin/python3 lacks venv: scripts/install-deps.sh --tests installs python3-venv")
        shutil.copytree(support.SDK, os.path.join(self.tmp, "sdk", "python"),
                        ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
        bare = os.path.join(self.tmp, "bare")
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", bare], check=True)
        path = os.environ.get("PATH", "")
        firsts = {"PATH's": shutil.which("python3", path=path), "Debian's": "/usr/bin/python3",
                  "a bare venv's": os.path.join(bare, "bin", "python3")}
        for which, first in firsts.items():
            with self.subTest(python3=which):
                for d in (".venv", "sdk/python/build"):
                    shutil.rmtree(os.path.join(self.tmp, d), True)
                env = dict(os.environ, PATH=os.path.dirname(first) + ":" + path, PIP_NO_INDEX="1",
                           PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1", PIP_ROOT_USER_ACTION="ignore",
                           PYTHONDONTWRITEBYTECODE="1")
                env.pop("PYTHONPATH", None)
                env.pop("PIP_FIND_LINKS", None)  # what a user has: no local wheels either
                got = subprocess.run(["sh", "-c", "command -v python3"], capture_output=True, text=True, env=env).stdout.strip()
                self.assertEqual(os.path.realpath(got), os.path.realpath(first))
                p = subprocess.run(["sh", "-ec", sh], capture_output=True, text=True, env=env, cwd=self.tmp, timeout=300)
                self.assertEqual(p.returncode, 0, "%s python3 (%s): %s%s" % (which, first, p.stdout, p.stderr))
                vpy = os.path.join(self.tmp, ".venv", "bin", "python")
                p = subprocess.run([vpy, "-c", "import airlock; print(airlock.__file__)"], capture_output=True, text=True,
                                   env=env, cwd="/")
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertTrue(p.stdout.startswith(os.path.join(self.tmp, ".venv")), p.stdout)


if __name__ == "__main__":
    unittest.main()
