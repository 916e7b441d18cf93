"""Shared by the tests: where the server is, and skips that fail in strict
runs (AIRLOCK_TEST_STRICT=1, as in CI: a test that cannot run is a
failure there, never a silent skip)."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)            # sdk/python
REPO = os.path.dirname(os.path.dirname(SDK))
sys.path.insert(0, SDK)


def strict():
    return os.environ.get("AIRLOCK_TEST_STRICT") == "1"


def skip(test, why):
    if strict():
        test.fail("cannot run (and AIRLOCK_TEST_STRICT=1 forbids skipping): " + why)
    raise unittest.SkipTest(why)


def need_server(test):
    """Skips (fails, strictly) without AIRLOCK_URL: the Go test
    e2e.TestPythonSDK starts a real server and sets it."""
    if not os.environ.get("AIRLOCK_URL"):
        skip(test, "AIRLOCK_URL is not set: run `go test ./e2e -run TestPythonSDK`, which starts a server")
