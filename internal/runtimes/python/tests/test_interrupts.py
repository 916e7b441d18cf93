"""SIGINT to the process group: interrupts executions, ignored while idle."""

from __future__ import annotations

import json
import struct
import time
import unittest

from harness import SessionMixin


class InterruptTest(SessionMixin, unittest.TestCase):
    def interrupted(self, code: str) -> dict:
        ex = self.rt.execute("print('started', flush=True)\n" + code, timeout=30, interrupt_on=b"started")
        self.assertEqual(ex.status, "interrupted", ex.messages)
        self.assertEqual(ex.error["name"], "KeyboardInterrupt")
        self.assertEqual(ex.done["exit_code"], 1)
        for line in ex.error["traceback"]:
            self.assertNotIn("airlock_runtime", line)
        return ex.error

    def test_interrupt_before_start(self) -> None:
        # The server's interrupt can come before the runtime has the code:
        # its SIGINT then finds the runtime idle (and is ignored; none is
        # sent here), but its message follows the execute on the socket. One
        # write: the runtime has both before it starts, and refuses the
        # execution.
        self.ok("ran = 'no'")
        frames = b""
        for msg in ({"type": "execute", "id": "early", "code": "ran = 'yes'\nwhile True:\n    pass"},
                    {"type": "interrupt", "id": "early"}):
            body = json.dumps(msg).encode()
            frames += struct.pack(">I", len(body)) + body
        self.rt.send_raw(frames)
        ex = self.rt.wait("early", timeout=30)
        self.assertEqual(ex.status, "interrupted", ex.messages)
        self.assertEqual(ex.error["name"], "KeyboardInterrupt")
        self.assertEqual(self.value("ran"), "'no'")
        # One for an execution that has ended changes nothing.
        self.rt.send({"type": "interrupt", "id": "early"})
        self.assertEqual(self.value("ran = 'later'\nran"), "'later'")

    def test_busy_loop(self) -> None:
        self.ok("kept = 'state'")
        error = self.interrupted("while True:\n    pass")
        self.assertEqual(error["traceback"][-1], "KeyboardInterrupt")
        self.assertEqual(self.value("kept"), "'state'")

    def test_sleep(self) -> None:
        self.ok("import time\ncounter = 1")
        error = self.interrupted("counter += 1\ntime.sleep(100)\ncounter += 100")
        self.assertIn("    time.sleep(100)", error["traceback"])
        self.assertEqual(self.value("counter"), "2")

    def test_shell_command(self) -> None:
        error = self.interrupted("!sleep 100\nprint('not reached')")
        self.assertEqual(len(error["traceback"]), 4, error["traceback"])  # no subprocess internals
        self.assertEqual(self.value("'fine'"), "'fine'")

    # Modules are imported in a cell of their own: an interrupt that lands
    # halfway through an import leaves the module broken, in Python as in
    # Jupyter, and a loaded machine can be that slow.
    def test_subprocess(self) -> None:
        self.ok("import subprocess")
        self.interrupted("subprocess.run(['sleep', '100'])")
        self.assertEqual(self.value("1 + 1"), "2")

    def test_top_level_await(self) -> None:
        self.ok("import asyncio")
        self.interrupted("await asyncio.sleep(100)")
        self.assertEqual(self.value("import asyncio\nawait asyncio.sleep(0)\n'loop ok'"), "'loop ok'")

    def test_output_and_display_heavy_loop(self) -> None:
        # Interrupts must never break a frame halfway through.
        self.interrupted("i = 0\nwhile True:\n    i += 1\n    display({'text/plain': 'x' * 5000}, raw=True)\n"
                         "    print('y' * 1000)")
        self.assertEqual(self.value("i > 0"), "True")

    def test_interrupt_during_repr(self) -> None:
        self.ok("class Slow:\n    def __repr__(self):\n        print('started', flush=True)\n"
                "        while True: pass")
        ex = self.rt.execute("Slow()", timeout=30, interrupt_on=b"started")
        self.assertEqual(ex.status, "interrupted", ex.messages)
        self.assertEqual(self.value("'after'"), "'after'")

    def test_user_code_catching_the_interrupt(self) -> None:
        ex = self.rt.execute("import time\nprint('started', flush=True)\ntry:\n    time.sleep(100)\n"
                             "except KeyboardInterrupt:\n    print('caught')\n'fine'",
                             timeout=30, interrupt_on=b"started")
        self.assertEqual(ex.status, "ok", ex.messages)
        self.assertEqual(ex.out, "started\ncaught\n")
        self.assertEqual(ex.text, "'fine'")

    def test_idle_sigint_is_ignored(self) -> None:
        self.ok("idle_state = 7")
        for _ in range(3):
            self.rt.interrupt()
            time.sleep(0.05)
        time.sleep(0.2)
        self.assertTrue(self.rt.alive())
        self.assertEqual(self.value("idle_state"), "7")

    def test_sigint_right_after_a_cell_that_installed_a_raising_handler(self) -> None:
        for _ in range(20):
            ex = self.ok("import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler);")
            self.rt.interrupt()  # as soon as done arrives
            ex = self.rt.execute("'next'")
            self.assertEqual(ex.status, "ok", ex.messages)
            self.assertNotIn("internal error", ex.err)
        self.assertTrue(self.rt.alive())

    def test_user_signal_handler_is_replaced_after_the_cell(self) -> None:
        self.ok("import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)")
        self.rt.interrupt()
        time.sleep(0.2)
        self.assertTrue(self.rt.alive())
        self.interrupted("while True: pass")
        self.ok("signal.signal(signal.SIGINT, signal.SIG_IGN)")
        self.interrupted("while True: pass")


if __name__ == "__main__":
    unittest.main()


class SigintWindowTest(unittest.TestCase):
    """Where the SIGINT handler runs decides whether it raises at once.

    A timeout of a millisecond lands the interrupt between the runtime's
    last checkpoint and the user's code (compiling, evaluating): deferring
    it there meant the cell ran on (time.sleep(5)) and the session was
    killed after the grace. Unit-tested on the handler itself, since the
    window is a few bytecodes wide.
    """

    def setUp(self) -> None:
        import sys
        from harness import RUNTIME_DIR
        sys.path.insert(0, RUNTIME_DIR)
        self.addCleanup(sys.path.remove, RUNTIME_DIR)
        from airlock_runtime import session
        self.session = session

    def handle(self, code) -> "types.SimpleNamespace":
        import types
        state = types.SimpleNamespace(busy=True, pending_interrupt=False, interrupted=False)
        frame = types.SimpleNamespace(f_code=code)
        try:
            self.session.Session._on_sigint(state, 2, frame)
        except KeyboardInterrupt:
            state.raised = True
        else:
            state.raised = False
        return state

    def test_raised_between_checkpoint_and_user_code(self) -> None:
        S = self.session.Session
        for code in (S.run_source.__code__, S._eval.__code__, S.checkpoint.__code__):
            st = self.handle(code)
            self.assertTrue(st.raised and st.interrupted and not st.pending_interrupt, code.co_name)

    def test_deferred_in_other_runtime_frames(self) -> None:
        st = self.handle(self.session.Session.send.__code__)
        self.assertFalse(st.raised)
        self.assertTrue(st.pending_interrupt)

    def test_ignored_while_idle(self) -> None:
        import types
        state = types.SimpleNamespace(busy=False, pending_interrupt=False, interrupted=False)
        self.session.Session._on_sigint(state, 2, None)
        self.assertFalse(state.pending_interrupt or state.interrupted)
