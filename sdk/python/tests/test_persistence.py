"""Pause, resume and fork through the SDK against a server with
persistence on (AIRLOCK_PERSIST_URL and AIRLOCK_PERSIST_TOKEN, which the
Go test e2e.TestPythonSDK sets): natively a pause keeps the files, not
the interpreter's variables (restored "files")."""

import os
import unittest

import support
import airlock
from airlock import Sandbox


class PersistenceTest(unittest.TestCase):
    def setUp(self):
        self.url = os.environ.get("AIRLOCK_PERSIST_URL")
        self.token = os.environ.get("AIRLOCK_PERSIST_TOKEN")
        if not self.url or not self.token:
            support.skip(self, "AIRLOCK_PERSIST_URL (a server with persistence.enabled) is not set: "
                               "run `go test ./e2e -run TestPythonSDK`, which starts one")
        self.boxes = []

    def tearDown(self):
        for b in self.boxes:
            b.kill()

    def create(self):
        sbx = Sandbox.create(base_url=self.url, token=self.token, limits={"timeout": 60})
        self.boxes.append(sbx)
        return sbx

    def test_pause_resume_fork(self):
        sbx = self.create()
        self.assertIsNone(sbx.run_code("x = 41").error)
        sbx.files.write("notes/a.txt", "kept across the pause")

        info = sbx.pause()
        self.assertEqual(info["state"], "paused")
        self.assertEqual(info["restores"], "files")
        self.assertIn(sbx.id, [s["id"] for s in Sandbox.list(base_url=self.url, token=self.token, state="paused")])
        # Created without auto_resume: a call meets the pause.
        with self.assertRaises(airlock.SessionPausedError) as cm:
            sbx.run_code("x")
        self.assertEqual((cm.exception.code, cm.exception.status), ("session_paused", 409))

        # A fork of the paused session: its files, a fresh interpreter;
        # the source stays paused.
        paused_fork = sbx.fork()
        self.boxes.append(paused_fork)
        self.assertNotEqual(paused_fork.id, sbx.id)
        self.assertEqual(paused_fork.info()["restored"], "files")
        self.assertEqual(paused_fork.files.read("notes/a.txt"), "kept across the pause")
        self.assertEqual(sbx.info()["state"], "paused")

        info = sbx.resume()
        self.assertNotEqual(info["state"], "paused")
        self.assertEqual(info["restored"], "files")
        self.assertEqual(sbx.files.read("notes/a.txt"), "kept across the pause")
        e = sbx.run_code("x")
        self.assertIsNotNone(e.error)
        self.assertEqual(e.error.name, "NameError")  # the interpreter restarted

        # A fork of the live session: its files, a fresh interpreter; the
        # source runs on with its own.
        self.assertIsNone(sbx.run_code("y = 7").error)
        fork = sbx.fork()
        self.boxes.append(fork)
        self.assertEqual(fork.info()["restored"], "files")
        self.assertEqual(fork.files.read("notes/a.txt"), "kept across the pause")
        self.assertEqual(fork.run_code("'y' in dir()").text, "False")
        fork.files.write("notes/a.txt", "the fork's")
        self.assertEqual(sbx.files.read("notes/a.txt"), "kept across the pause")
        self.assertEqual(sbx.run_code("y").text, "7")


if __name__ == "__main__":
    unittest.main()
