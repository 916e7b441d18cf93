"""A template's rehearsal (session.rehearse): a throwaway session in the
template's own process, which must leave the process as it found it."""

from __future__ import annotations

import json
import subprocess
import unittest

import harness
from harness import PYTHON

SCRIPT = r"""
import builtins, json, linecache, os, signal, sys, threading
sys.path.insert(0, {runtime_dir!r})
import airlock_runtime
from airlock_runtime import current, session

def state():
    return {{
        "fds": {{fd: os.readlink("/proc/self/fd/" + fd) for fd in sorted(os.listdir("/proc/self/fd"))
                 if os.path.exists("/proc/self/fd/" + fd)}},
        "path": list(sys.path), "argv": list(sys.argv),
        "main": id(sys.modules["__main__"]),
        "streams": [id(getattr(sys, n)) for n in ("stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__")],
        "signals": [repr(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ)],
        "builtins": sorted(n for n in ("display", "__airlock__") if hasattr(builtins, n)),
        "ipython": sorted(m for m in sys.modules if m.split(".")[0] == "IPython"),
        "cells": sorted(k for k in linecache.cache if k.startswith("Cell In")),
        "meta_path": [type(f).__name__ for f in sys.meta_path],
        "session": current.session is None,
        "threads": threading.active_count(),
    }}

before = state()
sent = session.rehearse(["import json", "leaked = [1, 2]", "sum(leaked)", "from IPython.display import HTML", "1/0"])
after = state()
print(json.dumps({{"before": before, "after": after, "sent": sent}}))
"""


class RehearsalTest(unittest.TestCase):
    def test_leaves_the_process_as_it_was(self) -> None:
        out = subprocess.run([PYTHON, "-I", "-B", "-c", SCRIPT.format(runtime_dir=harness.RUNTIME_DIR)],
                             env=harness.base_env(), capture_output=True, timeout=120, check=True)
        got = json.loads(out.stdout)
        self.maxDiff = None
        self.assertEqual(got["after"], got["before"])
        done = [m for m in got["sent"] if m["type"] == "done"]
        self.assertEqual([(m["status"], m["execution_count"]) for m in done],
                         [("ok", 1), ("ok", 2), ("ok", 3), ("ok", 4), ("error", 5)], got["sent"])
        result = [m for m in got["sent"] if m["type"] == "result"]
        self.assertEqual(result[0]["data"]["text/plain"], "3")
        self.assertEqual(out.stderr, b"")  # nothing of the throwaway session reaches the template's output


if __name__ == "__main__":
    unittest.main()
