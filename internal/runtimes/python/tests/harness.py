"""Drive the airlock_runtime package over its control socket, like the server does.

The runtime runs as ``python3 -I -B airlock_runtime`` in its own process
group with fd 3 = one end of a socketpair and fds 1/2 = pipes; this module
speaks the framing of docs/runtime-protocol.md and collects each
execution's messages together with the stdout/stderr bytes written before
``done``.
"""

from __future__ import annotations

import atexit
import base64
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIME_DIR = os.path.dirname(HERE)
RUNTIME = os.path.join(RUNTIME_DIR, "airlock_runtime")
PYTHON = sys.executable

# One matplotlib cache for the whole run (building it is slow).
_MPLCONFIG = tempfile.mkdtemp(prefix="airlock-mpl-")
atexit.register(shutil.rmtree, _MPLCONFIG, True)


def has_module(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is not None


#: Whether the interpreter under test has the real IPython (Debian's
#: python3-ipython): some of its classes behave unlike the runtime's
#: stand-in, and the tests say which they expect.
REAL_IPYTHON = has_module("IPython")


def base_env(**extra: str) -> dict:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": tempfile.gettempdir(),
        "LANG": "C.UTF-8",
        "MPLBACKEND": "module://airlock_mpl",
        "MPLCONFIGDIR": _MPLCONFIG,
        "PYTHONPATH": "/nonexistent",  # ignored by -I: the runtime must find its own directory
        "PYTHONUNBUFFERED": "1",
    }
    env.update(extra)
    return env


def png_bytes(b64: str) -> bytes:
    return base64.b64decode(b64, validate=True)


@dataclass
class Execution:
    """What one execute produced."""

    id: str
    messages: list = field(default_factory=list)
    stdout: bytes = b""
    stderr: bytes = b""
    installs: list = field(default_factory=list)

    @property
    def done(self) -> dict:
        return self.messages[-1]

    @property
    def status(self) -> str:
        return self.done["status"]

    @property
    def result(self) -> Optional[dict]:
        found = [m for m in self.messages if m["type"] == "result"]
        assert len(found) <= 1, found
        return found[0] if found else None

    @property
    def error(self) -> Optional[dict]:
        found = [m for m in self.messages if m["type"] == "error"]
        assert len(found) <= 1, found
        return found[0] if found else None

    @property
    def displays(self) -> list:
        return [m for m in self.messages if m["type"] == "display"]

    @property
    def text(self) -> Optional[str]:
        r = self.result
        return r["data"].get("text/plain") if r else None

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")


class ProtocolViolation(AssertionError):
    pass


class Runtime:
    """One runtime process and its descriptors."""

    def __init__(self, argv: Optional[list] = None, env: Optional[dict] = None,
                 cwd: Optional[str] = None, configure: bool = True, spawn: bool = True) -> None:
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        self.counter = 0
        self.buf = b""
        self.hello: Optional[dict] = None
        self.leftover_out = b""
        self.leftover_err = b""
        self.on_install: Any = None  # install message -> reply fields
        if spawn:
            # A descriptor number above 3, so that the dup2 to 3 always happens.
            high = fcntl.fcntl(child.fileno(), fcntl.F_DUPFD_CLOEXEC, 10)
            try:
                actions = [
                    (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, out_w, 1),
                    (os.POSIX_SPAWN_DUP2, err_w, 2),
                    (os.POSIX_SPAWN_DUP2, high, 3),
                ]
                self.pid = os.posix_spawn(
                    PYTHON, argv or [PYTHON, "-I", "-B", RUNTIME], env or base_env(),
                    file_actions=actions, setpgroup=0)
            finally:
                os.close(high)
        else:
            self.pid = None
        self.child_sock, self.out_w, self.err_w = child, out_w, err_w
        if spawn:
            self._close_child_ends()
            self.hello = self.recv(timeout=30)
            if self.hello.get("type") != "hello":
                raise ProtocolViolation(f"expected hello, got {self.hello}")
            if configure:
                self.configure(env=env or base_env(), cwd=cwd or os.getcwd())

    def _close_child_ends(self) -> None:
        self.child_sock.close()
        os.close(self.out_w)
        os.close(self.err_w)

    # -- framing --

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, msg: dict) -> None:
        body = json.dumps(msg).encode()
        self.sock.sendall(struct.pack(">I", len(body)) + body)

    def _read_pipes(self, timeout: float) -> None:
        r, _, _ = select.select([self.sock, self.out_r, self.err_r], [], [], timeout)
        for fd in r:
            if fd is self.sock:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise EOFError("control socket closed")
                self.buf += data
            else:
                data = os.read(fd, 1 << 20)
                if fd == self.out_r:
                    self.leftover_out += data
                else:
                    self.leftover_err += data

    def _frame(self) -> Optional[dict]:
        if len(self.buf) < 4:
            return None
        n = struct.unpack(">I", self.buf[:4])[0]
        if len(self.buf) < 4 + n:
            return None
        body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ProtocolViolation(f"runtime sent a malformed frame: {e}: {body[:200]!r}") from None

    def recv(self, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            msg = self._frame()
            if msg is not None:
                return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no message from the runtime")
            self._read_pipes(left)

    def _drain_pipes(self) -> tuple[bytes, bytes]:
        """Everything in the pipes now (the runtime flushed before `done`)."""
        for fd in (self.out_r, self.err_r):
            while True:
                r, _, _ = select.select([fd], [], [], 0)
                if not r:
                    break
                data = os.read(fd, 1 << 20)
                if not data:
                    break
                if fd == self.out_r:
                    self.leftover_out += data
                else:
                    self.leftover_err += data
        out, err = self.leftover_out, self.leftover_err
        self.leftover_out = self.leftover_err = b""
        return out, err

    # -- protocol --

    def configure(self, env: dict, cwd: str) -> dict:
        self.send({"type": "configure", "env": env, "cwd": cwd})
        reply = self.recv()
        if reply.get("type") != "configured":
            raise ProtocolViolation(f"expected configured, got {reply}")
        return reply

    def start(self, code: str) -> str:
        self.counter += 1
        exec_id = f"e{self.counter}"
        self.send({"type": "execute", "id": exec_id, "code": code})
        return exec_id

    def wait(self, exec_id: str, timeout: float = 60, interrupt_on: Optional[bytes] = None,
             interrupt_after: Optional[float] = None) -> Execution:
        """Collect messages until done; optionally SIGINT the process group
        once stdout contains interrupt_on (or after interrupt_after seconds)."""
        ex = Execution(exec_id)
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        sent_interrupt = False
        while True:
            msg = self._frame()
            if msg is None:
                if not sent_interrupt and (
                        (interrupt_on is not None and interrupt_on in self.leftover_out) or
                        (interrupt_after is not None and time.monotonic() - started >= interrupt_after)):
                    time.sleep(0.05)
                    self.interrupt()
                    sent_interrupt = True
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no done for {exec_id}; got {ex.messages}")
                self._read_pipes(min(left, 0.05))
                continue
            if msg.get("id") != exec_id:
                raise ProtocolViolation(f"message for another execution: {msg}")
            if msg["type"] == "install":
                # Answered as the server does; by default as a server
                # without a package index.
                ex.installs.append(msg)
                reply = self.on_install(msg) if self.on_install else {
                    "error": "unsupported: package installation is not configured on this server (packages.pip.index_url)"}
                self.send({"type": "installed", "id": exec_id, **reply})
                continue
            if msg["type"] not in ("display", "result", "error", "done"):
                raise ProtocolViolation(f"unexpected message {msg}")
            if ex.messages and ex.messages[-1]["type"] == "done":
                raise ProtocolViolation("message after done")
            ex.messages.append(msg)
            if msg["type"] == "done":
                ex.stdout, ex.stderr = self._drain_pipes()
                self._check_order(ex)
                return ex

    @staticmethod
    def _check_order(ex: Execution) -> None:
        order = {"display": 0, "result": 1, "error": 2, "done": 3}
        ranks = [order[m["type"]] for m in ex.messages]
        if ranks != sorted(ranks):
            raise ProtocolViolation(f"messages out of order: {[m['type'] for m in ex.messages]}")
        d = ex.done
        if d["status"] == "exited":  # a program run: exit_code is the program's
            return
        if d["status"] == "ok" and (d["exit_code"] != 0 or ex.error is not None):
            raise ProtocolViolation(f"inconsistent done: {d} {ex.error}")
        if d["status"] in ("error", "interrupted") and ex.error is None:
            raise ProtocolViolation(f"status {d['status']} without an error message")

    def execute(self, code: str, timeout: float = 60, **kwargs: Any) -> Execution:
        return self.wait(self.start(code), timeout=timeout, **kwargs)

    def interrupt(self) -> None:
        os.killpg(self.pid, signal.SIGINT)

    def alive(self) -> bool:
        return self.pid is not None and os.waitpid(self.pid, os.WNOHANG) == (0, 0)

    def wait_exit(self, timeout: float = 10) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.pid = None
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.01)
        raise TimeoutError("runtime did not exit")

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            for fd in (self.out_r, self.err_r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            if self.pid is not None:
                try:
                    self.wait_exit(5)
                except TimeoutError:
                    os.killpg(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
                self.pid = None


def check_shutdown_runs_atexit(test, rt: "Runtime") -> None:
    """A registered atexit handler runs when rt is told to shut down, and rt
    exits 0; rt is closed afterwards."""
    try:
        rt.execute("import atexit\natexit.register(print, 'bye', flush=True)")
        rt.send({"type": "shutdown"})
        test.assertEqual(rt.wait_exit(), 0)
        out, _ = rt._drain_pipes()
        test.assertEqual(out, b"bye\n")
    finally:
        rt.close()


def tiny_png(width: int = 2, height: int = 2) -> bytes:
    """A valid RGB PNG (stdlib only)."""
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


class SessionMixin:
    """unittest helpers around one runtime shared by a TestCase class."""

    rt: Runtime

    @classmethod
    def setUpClass(cls) -> None:
        cls.rt = Runtime()

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            cls.rt.send({"type": "shutdown"})
        except OSError:
            pass
        cls.rt.close()

    def ok(self, code: str, **kwargs: Any) -> Execution:
        """Execute code and assert it succeeded."""
        ex = self.rt.execute(code, **kwargs)
        if ex.status != "ok":
            self.fail(f"{code!r} failed: {ex.error}\nstdout: {ex.out}\nstderr: {ex.err}")
        return ex

    def value(self, code: str) -> Optional[str]:
        """text/plain of code's result (None if there is no result)."""
        return self.ok(code).text

    def failing(self, code: str, name: str, status: str = "error", **kwargs: Any) -> Execution:
        ex = self.rt.execute(code, **kwargs)
        self.assertEqual(ex.status, status, ex.messages)
        self.assertIsNotNone(ex.error, ex.messages)
        self.assertEqual(ex.error["name"], name, ex.error)
        for line in ex.error["traceback"]:
            self.assertNotIn("airlock_runtime", line, ex.error["traceback"])
        return ex
