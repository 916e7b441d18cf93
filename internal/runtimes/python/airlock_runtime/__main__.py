"""``python3 -I -B /opt/airlock/python/airlock_runtime``: the standalone runtime.

A lean program run alone starts it as ``python3 -I -S -B
/opt/airlock/python/airlock_runtime/__main__.py``: without site, and as a
file, so that runpy (and what it imports) is not loaded either."""

import os
import sys

# Run as a directory (or as its __main__.py), the package's own directory
# is first on sys.path: its modules (wire, display, session, ...) must not be importable as
# top-level modules by user code. The directory above holds the package
# and airlock_mpl, and comes last, as a session wants it.
sys.path[:] = [p for p in sys.path[1:]] + [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]

import airlock_runtime  # noqa: E402

airlock_runtime.main()
