"""The SDK installs with pip from the repository and builds a wheel,
offline (no PyPI: --no-index) and with nothing but pip (its own build
backend, in the standard library alone), and what is installed imports.
test_readme runs the agents guide's install into a venv."""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import support

PY = sys.executable


def _have(module):
    return subprocess.run([PY, "-c", "import " + module], capture_output=True).returncode == 0


class PackagingTest(unittest.TestCase):
    def setUp(self):
        for m in ("pip",):
            if not _have(m):
                support.skip(self, "%s lacks %s: scripts/install-deps.sh --tests installs python3-%s" % (PY, m, m))
        self.tmp = tempfile.mkdtemp(prefix="airlock-sdk-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        # Build from a copy: nothing may depend on what lies beside the sources.
        self.src = os.path.join(self.tmp, "src")
        shutil.copytree(support.SDK, self.src, ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
        self.env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PIP_NO_CACHE_DIR="1", PYTHONDONTWRITEBYTECODE="1",
                        PIP_ROOT_USER_ACTION="ignore")
        self.env.pop("PYTHONPATH", None)

    def run_ok(self, *cmd, **kw):
        p = subprocess.run(list(cmd), capture_output=True, text=True, env=kw.pop("env", self.env), timeout=300, **kw)
        self.assertEqual(p.returncode, 0, "%s failed:\n%s\n%s" % (" ".join(cmd), p.stdout, p.stderr))
        return p.stdout

    def check_import(self, python, env, where):
        out = self.run_ok(python, "-c",
                          "import sys, airlock, airlock.langchain\n"
                          "assert 'langchain_core' not in sys.modules\n"
                          "print(airlock.__file__)\nprint(airlock.__version__)\nprint(airlock.Sandbox.create.__name__)",
                          env=env, cwd=self.tmp)
        path, version, name = out.split()
        self.assertTrue(path.startswith(where), "airlock imported from %s, not from %s" % (path, where))
        self.assertEqual((version, name), ("0.1.0", "create"))

    def test_wheel_builds_and_installs(self):
        dist = os.path.join(self.tmp, "dist")
        self.run_ok(PY, "-m", "pip", "wheel", "--no-deps", "--no-index", "-w", dist, self.src)
        wheels = glob.glob(os.path.join(dist, "*.whl"))
        self.assertEqual(len(wheels), 1, os.listdir(dist))
        self.assertRegex(os.path.basename(wheels[0]), r"^airlock_sandbox-0\.1\.0-py3-none-any\.whl$")
        import zipfile
        names = zipfile.ZipFile(wheels[0]).namelist()
        for f in ("airlock/__init__.py", "airlock/langchain.py", "airlock/py.typed"):
            self.assertIn(f, names)
        self.assertFalse([n for n in names if n.startswith("tests/")], names)
        target = os.path.join(self.tmp, "target")
        self.run_ok(PY, "-m", "pip", "install", "--no-index", "--no-deps", "--target", target, wheels[0])
        self.check_import(PY, dict(self.env, PYTHONPATH=target), target)


if __name__ == "__main__":
    unittest.main()
