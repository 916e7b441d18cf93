"""The session: its state and the protocol loop (one per process).

``serve`` sets a session up (stdio, ``sys.path``, a real ``__main__`` as the
user's namespace, the ``display`` and ``__airlock__`` builtins, the IPython
stand-in, SIGINT handling), says hello, and answers the server's messages
until end of file: ``configure``, ``execute`` (cells compiled with
top-level await, the last expression's value as the ``result``, every
failure reported and the session kept) and ``run`` (program mode).
"""

from __future__ import annotations

import _signal
import _thread
import builtins
import io
import os
import sys

from . import current, wire

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc

# What only executions use is imported by the first one (_load): a program
# run, the session's first and last act, never pays for compiling it, nor
# for importing ast, linecache or typing (annotations are never evaluated,
# PEP 563).
ast: Any = None
linecache: Any = None
compilerop: Any = None
display: Any = None
magics: Any = None
syntax: Any = None
tracebacks: Any = None


def _load() -> None:
    global ast, linecache, compilerop, display, magics, syntax, tracebacks
    if tracebacks is None:
        import ast
        import linecache

        from . import compilerop, display, magics, syntax, tracebacks  # noqa: F811


def _overlay_env(env: dict) -> Any:
    """Sets env's variables for one execution (E2B's run_code envs) and
    returns what puts each back as it was, or unsets it again."""
    saved = {k: os.environ.get(k) for k in env}
    try:
        os.environ.update(env)
    except (ValueError, OSError):
        pass  # names the server checked; a value the OS refuses is left out
    _path_from_env()

    def restore() -> None:
        for k, v in saved.items():
            try:
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            except (ValueError, OSError):
                pass
    return restore


def _path_from_env() -> bool:
    """Puts the directories of a PYTHONPATH set by configure on sys.path,
    as the interpreter would have done had it started with it: a pooled
    interpreter (or a forked one) started before its session's
    environment was known. Whether it added any."""
    new = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    if not new:
        return False
    at = 1 if sys.path[:1] == [""] else 0
    sys.path[at:at] = new
    import importlib
    importlib.invalidate_caches()
    return True


LANGUAGE = "python"

_CO_COROUTINE = 0x0080  # inspect.CO_COROUTINE, without importing inspect
_TOP_LEVEL_AWAIT = 0x2000  # ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, without importing ast

_NO_VALUE = object()  # "the cell has no value to show" (None is a value)

# The signals a session handles (rehearse puts them back).
_SESSION_SIGNALS = tuple(getattr(_signal, n) for n in ("SIGPIPE", "SIGXFSZ", "SIGINT") if hasattr(_signal, n))


class Session:
    """State of one session and its protocol loop (one per process)."""

    def __init__(self, ctl_fd: int) -> None:
        self.pid = os.getpid()
        self.main_thread = _thread.get_ident()
        # Move the control socket off fd 3 to a close-on-exec descriptor, so
        # that neither user code nor the processes it starts can write to it.
        fd = os.dup(ctl_fd)
        os.close(ctl_fd)
        self.chan = wire.Channel(fd)

        # stdout/stderr: line-buffered UTF-8 straight on fds 1/2; keep copies
        # of the descriptors to restore them if user code closes them.
        self.saved_fds = {}
        self._stdio_poll: Any = None  # made by the first _closed_fds()
        for n in (0, 1, 2):
            try:
                self.saved_fds[n] = os.dup(n)
            except OSError:
                pass
        current.discard_buffered_output((sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__),
                                 self.saved_fds)
        self.stdout = current.text_stream(1)
        self.stderr = current.text_stream(2)
        self.retired: list[io.TextIOWrapper] = []
        sys.stdout = sys.__stdout__ = self.stdout
        sys.stderr = sys.__stderr__ = self.stderr
        if sys.stdin is None or current.is_closed(sys.stdin):
            sys.stdin = sys.__stdin__ = current.text_stream(0, "r")

        # Imports: the cwd (like Jupyter) first, the runtime's directory (for
        # airlock_mpl) last.
        if current.RUNTIME_DIR not in sys.path:
            sys.path.append(current.RUNTIME_DIR)
        if "" not in sys.path:
            sys.path.insert(0, "")
        sys.argv = [""]

        # The user's namespace is a real __main__ module, so that classes and
        # functions defined in cells pickle and `if __name__ == "__main__":` runs.
        self.main = type(sys)("__main__")  # types.ModuleType, without importing types
        self.main.__dict__["__builtins__"] = builtins
        self.ns = self.main.__dict__
        sys.modules["__main__"] = self.main
        self.initial_names = frozenset(self.ns)

        # The display and __airlock__ builtins, the IPython stand-in and
        # the cell compiler come with the first execution (_executions).
        self.magics: Any = None
        self.compiler: Any = None

        self.execution_count = 0
        self.exec_id: Optional[str] = None
        self.busy = False
        self.interrupted = False
        self.pending_interrupt = False
        self.magic_lines: dict[str, set[int]] = {}
        self.filename = ""
        self.captures: list[list] = []
        self.underscore: Any = _NO_VALUE
        self.loop: Any = None

        # Figures left open by a zygote must not show up in the first cell.
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is not None:
            try:
                plt.close("all")
            except Exception:  # noqa: BLE001
                pass

        # Signals as in a freshly started interpreter (a zygote may have reset
        # them all to SIG_DFL): SIGPIPE and SIGXFSZ ignored, so that writing to
        # a closed pipe raises BrokenPipeError instead of killing the session.
        for sig in _SESSION_SIGNALS:
            if sig != _signal.SIGINT:
                _signal.signal(sig, _signal.SIG_IGN)
        self.sigint = self._on_sigint
        _signal.signal(_signal.SIGINT, self.sigint)

    # -- signals --

    def _on_sigint(self, signum: int, frame: Optional[types.FrameType]) -> None:
        """SIGINT: KeyboardInterrupt in user code; ignored while idle.

        Never raised inside the runtime's own frames (e.g. halfway through
        writing a frame): there it is recorded and raised at the next
        checkpoint before user code runs again. The frames between the last
        checkpoint and user code (compiling, evaluating) hold nothing half
        done: there it is raised at once, or it would wait for a checkpoint
        that comes only after the cell.
        """
        if not self.busy:
            return
        if (frame is not None and frame.f_code not in _INTERRUPTIBLE
                and current.is_runtime_file(frame.f_code.co_filename)):
            self.pending_interrupt = True
            return
        self.interrupted = True
        raise KeyboardInterrupt

    def checkpoint(self) -> None:
        """Raise an interrupt that arrived while the runtime's code was running."""
        if self.pending_interrupt and self.busy and _thread.get_ident() == self.main_thread:
            self.pending_interrupt = False
            self.interrupted = True
            raise KeyboardInterrupt

    # -- sending --

    def send(self, msg: dict) -> None:
        """Send a message (flushing stdout/stderr first); fatal if the peer is gone."""
        current.flush_stdio()
        payload = self._payload(msg)
        with self.chan.lock:
            self._write(payload)

    def _write(self, payload: bytes) -> None:
        try:
            self.chan.write_frame(payload)
        except OSError as e:
            # The server is gone (or the socket was sabotaged): nothing to report to.
            import errno
            os._exit(0 if e.errno in (errno.EPIPE, errno.ECONNRESET) else 2)

    def _payload(self, msg: dict) -> bytes:
        try:
            payload = wire.encode(msg)
        except (ValueError, TypeError, RecursionError, MemoryError) as e:
            payload = wire.encode(self._shrunk(msg, f"message could not be encoded ({type(e).__name__})"))
        if len(payload) > wire.MAX_FRAME - 1024:
            payload = wire.encode(self._shrunk(msg, f"message of {len(payload):,} bytes exceeds the frame limit"))
        return payload

    @staticmethod
    def _shrunk(msg: dict, why: str) -> dict:
        """A small stand-in for a message that cannot be sent as is."""
        msg = dict(msg)
        if "data" in msg:
            plain = msg["data"].get("text/plain", "") if isinstance(msg["data"], dict) else ""
            plain = plain[:65536] if isinstance(plain, str) else ""
            msg["data"] = {"text/plain": (plain + f"\n[airlock: output omitted: {why}]").lstrip("\n")}
            msg["metadata"] = {}
        if "traceback" in msg:
            tb = msg["traceback"] if isinstance(msg["traceback"], list) else []
            msg["traceback"] = [str(x)[:4096] for x in tb[:50]] + [f"[airlock: traceback shortened: {why}]"]
            msg["value"] = str(msg.get("value", ""))[:65536]
        return msg

    def begin(self, msg_id: str) -> None:
        """Attribute what is displayed from now on to execution msg_id."""
        with self.chan.lock:
            self.exec_id = msg_id

    def send_done(self, done: Union[dict, bytes]) -> None:
        """Send an execution's ``done`` (a message, or one encoded by
        wire.encode_done), its last message: nothing displayed after it is
        attributed to it."""
        payload = done if type(done) is bytes else self._payload(done)
        with self.chan.lock:
            self.exec_id = None
            self._write(payload)

    def publish(self, data: dict, metadata: dict) -> None:
        """Send a display message for the running execution (any thread)."""
        if os.getpid() != self.pid:
            return  # a forked child of user code must not talk on our socket
        if self.captures and _thread.get_ident() == self.main_thread:
            self.captures[-1].append((data, metadata))
            return
        current.flush_stdio()
        with self.chan.lock:
            if self.exec_id is None:
                return  # no execution is running: nowhere to attribute it
            payload = self._payload({"type": "display", "id": self.exec_id,
                                     "data": data, "metadata": metadata})
            self._write(payload)
        self.checkpoint()

    # -- the loop --

    def run(self, cells: bool = False) -> None:
        if cells:
            # A pooled runtime (forked from a template): what a session's
            # first execution would set up is set up before the hello, while
            # the sandbox waits in its pool, off the session's request path.
            self._executions()
        self.send({"type": "hello", "language": LANGUAGE,
                   "version": "%d.%d.%d" % sys.version_info[:3], "pid": self.pid})
        while True:
            try:
                msg = self.chan.recv()
            except wire.ProtocolError as e:
                self.fatal(str(e))
            except OSError as e:
                self.fatal(f"cannot read the control socket: {e}")
            if msg is None:
                return
            kind = msg["type"]
            if kind == "shutdown":
                return
            if kind in ("installed", "interrupt"):
                # A reply to an install its cell stopped waiting for; an
                # interrupt for an execution that has ended.
                continue
            if kind == "execute":
                # No code is an empty cell, as "" is: it does nothing.
                msg_id, code, env = msg.get("id"), msg.get("code", ""), msg.get("env")
                if type(msg_id) is not str or type(code) is not str:
                    self.fatal("execute needs a string 'id' and a string 'code'")
                if env is not None and (type(env) is not dict or
                                        any(type(k) is not str or type(v) is not str for k, v in env.items())):
                    self.fatal("execute: 'env' must map strings to strings")
            elif kind == "run":
                from . import program
                program.run(self, program.request(msg, self.fatal))  # never returns
            elif kind != "configure":
                self.fatal(f"unknown message type {kind!r}")
            try:
                if kind == "execute":
                    restore = _overlay_env(env) if env else None
                    try:
                        self.execute(msg_id, code)
                    finally:
                        if restore is not None:
                            restore()
                else:
                    self.configure(msg)
            except BaseException as e:  # noqa: BLE001 - a bug here must not end the session
                self._internal_error(e)

    def _internal_error(self, e: BaseException) -> None:
        """Last resort for a bug in the runtime: note it, and end the execution."""
        self.busy = False
        try:
            os.write(2, f"airlock runtime: internal error: {type(e).__name__}\n".encode())
        except OSError:
            pass
        exec_id = self.exec_id
        if exec_id is not None:  # its done was not sent
            with self.chan.lock:
                self.exec_id = None
                self._write(wire.encode({
                    "type": "error", "id": exec_id, "name": "InternalError",
                    "value": "airlock runtime error", "traceback": []}))
                self._write(wire.encode({
                    "type": "done", "id": exec_id, "status": "error",
                    "execution_count": self.execution_count, "exit_code": 1}))

    def fatal(self, why: str) -> None:
        current.flush_stdio()
        try:
            os.write(2, f"airlock runtime: fatal protocol error: {why}\n".encode("utf-8", "replace"))
        except OSError:
            pass
        os._exit(2)

    def configure(self, msg: dict) -> None:
        env, cwd, defaults = msg.get("env"), msg.get("cwd"), msg.get("defaults")
        for key, m in (("env", env), ("defaults", defaults)):
            if m is not None and (type(m) is not dict or
                                  any(type(k) is not str or type(v) is not str for k, v in m.items())):
                self.fatal(f"configure: '{key}' must map strings to strings")
        if cwd is not None and type(cwd) is not str:
            self.fatal("configure: 'cwd' must be a string")
        errors = []
        if env is not None:
            try:
                os.environ.clear()
                os.environ.update(env)
            except (ValueError, OSError) as e:
                errors.append(f"environment: {e}")
            if _path_from_env() and self.compiler is not None and self.execution_count == 0:
                # Set up for cells before the session's environment was
                # known (a pooled runtime): decide again between IPython
                # and the stand-in, as the first execution would have.
                display.reconsider_ipython()
        if defaults is not None:
            try:
                for k, v in defaults.items():
                    os.environ.setdefault(k, v)
            except (ValueError, OSError) as e:
                errors.append(f"environment: {e}")
        if cwd:
            try:
                os.chdir(cwd)
            except OSError as e:
                errors.append(f"cannot change directory to {cwd!r}: {e.strerror}")
        reply: dict[str, Any] = {"type": "configured"}
        if msg.get("reseed") is True:
            # A restored fork: its memory, generators included, is its
            # source's. Said in the reply: the server tells the client.
            current.reseed()
            reply["reseeded"] = True
        if errors:
            reply["error"] = "; ".join(errors)
        self.send(reply)

    # -- executing --

    def _executions(self) -> None:
        """Set up what cells have and a program run does not: the display
        and ``__airlock__`` builtins, the IPython stand-in, the compiler."""
        if self.compiler is not None:
            return
        _load()
        self.magics = magics.Magics(self)
        builtins.display = display.display
        builtins.__airlock__ = self.magics
        display.install_ipython_shim()
        self.compiler = compilerop.CellCompiler()
        # The polls executions make (an interrupt waiting, fds 0-2 closed),
        # set up now, before any user code could replace select.
        self.chan.pending()
        self._closed_fds()

    def execute(self, msg_id: str, code: str) -> None:
        """Run one cell and send its messages; always ends with ``done``."""
        self._executions()
        self.execution_count += 1
        count = self.execution_count
        self.begin(msg_id)
        self.interrupted = self.pending_interrupt = False
        result = error = report = None
        try:
            self.busy = True
            try:
                self._interrupted_before(msg_id)
                value = self.run_cell(code, count)
                self._check_fork()
                if value is not _NO_VALUE and value is not None:
                    self._bind_underscore(value)
                    self.checkpoint()
                    result = display.format_display_data(value)
            except BaseException as e:  # noqa: BLE001 - user code may raise anything
                self._check_fork()
                error = e
            try:
                self.checkpoint()
                self.flush_figures()
            except BaseException as e:  # noqa: BLE001
                if error is None:
                    error = e
            if error is not None:
                report = self._report(error)
            try:
                current.flush_stdio()
            except BaseException:  # noqa: BLE001
                pass
        except BaseException as e:  # noqa: BLE001 - a runtime bug must not lose `done`
            if error is None:
                error = e
            if report is None:
                report = self._report(error)
        finally:
            # First our SIGINT handler back (user code may have replaced it with
            # one that raises anywhere), then interrupts off.
            self._restore_sigint()
            self.busy = False
        self.pending_interrupt = False
        self._repair_stdio()

        status, exit_code = "ok", 0
        if isinstance(error, SystemExit):
            code_ = error.code
            if code_ is None or (isinstance(code_, int) and code_ == 0):
                report = None  # a clean exit is not an error
            else:
                # Like a process: an int is the status (mod 256); anything else is 1.
                status = "error"
                exit_code = (int(code_) & 0xFF or 1) if isinstance(code_, int) else 1
        elif isinstance(error, KeyboardInterrupt) and self.interrupted:
            status, exit_code = "interrupted", 1
        elif error is not None:
            status, exit_code = "error", 1
        error = None  # drop frames (and their locals) promptly

        try:
            if result is not None:
                data, md = result
                self.send({"type": "result", "id": msg_id, "data": data, "metadata": md,
                           "execution_count": count})
            if report is not None:
                name, value, tb = report
                self.send({"type": "error", "id": msg_id, "name": name, "value": value,
                           "traceback": tb})
        finally:
            done = wire.encode_done(msg_id, status, count, exit_code)
            current.flush_stdio()
            self.send_done(done)

    def _interrupted_before(self, msg_id: str) -> None:
        """Raise the interrupt the server sent before the execution started.

        Its SIGINT may have come while the runtime was idle (ignored then),
        but its message, sent after the execution and before the SIGINT,
        is on the socket by now: the messages waiting there are read (only
        interrupts, and installed replies for cells that stopped waiting,
        can come during an execution).
        """
        interrupted = False
        while self.chan.pending():
            msg = self.chan.recv()
            if msg is None:
                break
            kind = msg["type"]
            if kind == "interrupt" and msg.get("id") == msg_id:
                interrupted = True
            elif kind not in ("interrupt", "installed"):
                self.fatal(f"{kind!r} during an execution")
        if interrupted:
            self.interrupted = True
            raise KeyboardInterrupt

    def _check_fork(self) -> None:
        # User code forked and the child returned from the cell: it must not
        # run the rest of the protocol (the parent does).
        if os.getpid() != self.pid:
            current.flush_stdio()
            os._exit(0)

    def _report(self, error: BaseException) -> tuple[str, str, list[str]]:
        """Format an exception; never raises."""
        try:
            return tracebacks.format_exception(error, self.magic_lines)
        except BaseException:  # noqa: BLE001 - interrupted, or a hostile exception object
            try:
                name = type(error).__name__
            except BaseException:  # noqa: BLE001
                name = "Exception"
            return name, "", [f"{name}: <the traceback could not be formatted>"]

    def run_cell(self, code: str, count: int) -> Any:
        """Compile and run a cell; return its final expression value or _NO_VALUE."""
        filename = f"Cell In[{count}]"  # also what warnings and SyntaxErrors show
        self.filename = filename
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        return self.run_source(code, filename)

    def run_nested(self, body: str, first_line: int) -> Any:
        """Run the body of a cell magic (lines numbered as in the cell)."""
        value = self.run_source("\n" * (first_line - 1) + body, self.filename)
        return None if value is _NO_VALUE else value

    def run_source(self, source: str, filename: str) -> Any:
        if syntax.MAGIC_HINT.search(source):
            source, magic = syntax.transform_cell(source)
            if magic:
                self.magic_lines.setdefault(filename, set()).update(magic)
                builtins.__airlock__ = self.magics  # in case user code removed it
        compiler = self.compiler
        tree = compiler.ast_parse(source, filename, _TOP_LEVEL_AWAIT)
        body = tree.body
        last = None
        if body and isinstance(body[-1], ast.Expr) and not _ends_with_semicolon(source, body[-1]):
            last = body.pop()
        code = compiler(tree, filename, "exec", _TOP_LEVEL_AWAIT)
        expr = None
        if last is not None:
            expr = compiler(ast.Expression(last.value), filename, "eval", _TOP_LEVEL_AWAIT)
        self.checkpoint()
        self._eval(code)
        if expr is None:
            return _NO_VALUE
        self.checkpoint()
        return self._eval(expr)

    def _eval(self, code: types.CodeType) -> Any:
        if code.co_flags & _CO_COROUTINE:
            return self._run_coroutine(eval(code, self.ns))
        return eval(code, self.ns)

    def _run_coroutine(self, coro: Any) -> Any:
        """Run a cell with top-level await on the session's event loop."""
        import asyncio
        loop = self.loop
        if loop is None or loop.is_closed():
            loop = self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        task = loop.create_task(coro)
        try:
            return loop.run_until_complete(task)
        except BaseException:
            if not task.done():
                task.cancel()
                try:
                    loop.run_until_complete(task)
                except BaseException:  # noqa: BLE001 - the cancellation itself
                    pass
            raise

    def _bind_underscore(self, value: Any) -> None:
        ns = self.ns
        if ns.get("_", _NO_VALUE) is not self.underscore:
            return  # the user bound `_` themselves
        ns["___"] = ns.get("__", "")
        ns["__"] = ns.get("_", "")
        ns["_"] = self.underscore = value

    def reset_namespace(self) -> None:
        keep = {k: self.ns[k] for k in self.initial_names if k in self.ns}
        self.ns.clear()
        self.ns.update(keep)
        self.underscore = _NO_VALUE

    def flush_figures(self) -> None:
        """Show (and close) the pyplot figures the cell left open, like Jupyter."""
        helpers = sys.modules.get("matplotlib._pylab_helpers")
        if helpers is None or "matplotlib.pyplot" not in sys.modules:
            return
        try:
            if not helpers.Gcf.figs:
                return
        except AttributeError:
            return
        backend = display.mpl_backend()
        if backend is not None:
            backend.flush_figures()

    def _restore_sigint(self) -> None:
        try:
            if _signal.getsignal(_signal.SIGINT) is not self.sigint:
                _signal.signal(_signal.SIGINT, self.sigint)
        except (ValueError, OSError):
            pass

    def _closed_fds(self) -> Container[int]:
        """Which of fds 0-2 are closed: one poll(2) for the three (an fd
        that is not open is POLLNVAL), instead of an fstat each."""
        try:
            if self._stdio_poll is None:
                import select
                self._stdio_poll = select.poll()
                for fd in self.saved_fds:
                    self._stdio_poll.register(fd, 0)
                self._pollnval = select.POLLNVAL
            return {fd for fd, ev in self._stdio_poll.poll(0) if ev & self._pollnval}
        except (OSError, ValueError):
            closed = set()
            for fd in self.saved_fds:
                try:
                    os.fstat(fd)
                except OSError:
                    closed.add(fd)
            return closed

    def _repair_stdio(self) -> None:
        """Repair what user code may have broken before the next message:
        closed fds 0-2, closed or missing sys streams, a tiny recursion limit."""
        closed = self._closed_fds()
        for fd, saved in self.saved_fds.items():
            if fd in closed:
                try:
                    os.dup2(saved, fd)
                except OSError:
                    continue
                name = {1: "stdout", 2: "stderr"}.get(fd)
                if name is not None:
                    # Our stream may still buffer what could not be written while
                    # fd was closed: retire it (kept alive, so never flushed) rather
                    # than let that output surface in the next execution.
                    old = getattr(self, name)
                    self.retired.append(old)
                    setattr(self, name, current.text_stream(fd))
                    if getattr(sys, name, None) is old:
                        setattr(sys, name, getattr(self, name))
                    if getattr(sys, f"__{name}__", None) is old:
                        setattr(sys, f"__{name}__", getattr(self, name))
        for name, fd in (("stdout", 1), ("stderr", 2)):
            stream = getattr(sys, name, None)
            if stream is None or current.is_closed(stream):
                ours = getattr(self, name)
                if current.is_closed(ours):
                    ours = current.text_stream(fd)
                    setattr(self, name, ours)
                setattr(sys, name, ours)
                setattr(sys, f"__{name}__", ours)
        if sys.stdin is None or current.is_closed(sys.stdin):
            sys.stdin = sys.__stdin__ = current.text_stream(0, "r")
        if sys.getrecursionlimit() < 200:
            sys.setrecursionlimit(1000)


# Runtime frames an interrupt may be raised in (see Session._on_sigint).
_INTERRUPTIBLE = frozenset({Session.run_source.__code__, Session._eval.__code__, Session.checkpoint.__code__})


def _ends_with_semicolon(source: str, node: ast.stmt) -> bool:
    """Whether the final expression statement is followed by ';' (suppressed)."""
    if ";" not in source:
        return False
    lines = source.splitlines()
    if not node.end_lineno or node.end_lineno > len(lines):
        return False
    rest = lines[node.end_lineno - 1].encode("utf-8")[node.end_col_offset:]
    return rest.decode("utf-8", "replace").lstrip().startswith(";")


def serve(ctl_fd: int = 3, cells: bool = False) -> None:
    """Run the session protocol on ctl_fd until ``shutdown`` or end of file.

    All per-session setup happens here (stdio, sys.path, the ``__main__``
    namespace, builtins, the IPython stand-in, SIGINT handling, hello), so
    the package can be imported by a zygote that forks and calls serve() in
    the child.  A malformed frame ends the process with exit status 2.
    With ``cells`` (a template's child, which waits in a pool), what only
    executions need is set up before the hello instead of by the first
    execution; a program run takes it away again.
    """
    if current.session is not None:
        raise RuntimeError("airlock_runtime.serve() is already running")
    current.session = Session(ctl_fd)
    try:
        current.session.run(cells)
    finally:
        current.flush_stdio()
        current.session = None


def rehearse(cells: Sequence[str]) -> list[dict]:
    """Run cells in a throwaway session of this process, as a template's
    child runs its first executions (the session's setup, compiling,
    running, formatting the value, the protocol's framing and JSON), then
    undo everything a session changes process-wide, so that a template
    that forks after it gives its children the one-time set-up and the
    caches this fills, shared copy-on-write, and nothing else: no
    namespace, no builtins, no stand-in module, no handler, no
    descriptor, no line cache of its cells. Returns the messages the
    throwaway session sent. Never with a session running."""
    if current.session is not None:
        raise RuntimeError("rehearse() inside a session")
    import socket
    import threading
    _load()
    current.flush_stdio()
    streams = {n: getattr(sys, n) for n in ("stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__")}
    path, argv, main_mod = list(sys.path), sys.argv, sys.modules.get("__main__")
    handlers = {sig: _signal.getsignal(sig) for sig in _SESSION_SIGNALS}
    had = {n: vars(builtins)[n] for n in ("display", "__airlock__") if n in vars(builtins)}
    modules = set(sys.modules)
    meta_path = list(sys.meta_path)
    lines = set(linecache.cache)
    fds = _open_fds()
    routed = display.routed_functions()
    shims = dict(display.SHIM_MODULES)
    ours, theirs = socket.socketpair()
    sent: list[dict] = []

    def drive() -> None:
        # As the server does: one execution at a time, each after the
        # previous one's done.
        chan = wire.Channel(ours.fileno())
        try:
            for i, code in enumerate(("",) + tuple(cells)):
                if i:
                    chan.write_frame(wire.encode({"type": "execute", "id": f"rehearsal-{i}", "code": code}))
                while (msg := chan.recv()) is not None:
                    sent.append(msg)
                    if msg["type"] in ("hello", "done"):
                        break
                else:
                    return
            chan.write_frame(wire.encode({"type": "shutdown"}))
        except (OSError, wire.ProtocolError):
            pass
        finally:
            try:
                ours.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    driver = threading.Thread(target=drive, name="airlock-rehearsal")
    session = None
    try:
        driver.start()
        fd = theirs.detach()
        try:
            session = Session(fd)
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            raise
        current.session = session
        session.run(True)  # as a template's child runs
    finally:
        current.session = None
        try:
            ours.shutdown(socket.SHUT_RD)  # a driver still waiting stops
        except OSError:
            pass
        if session is not None:
            for fd in [session.chan.fd, *session.saved_fds.values()]:
                try:
                    os.close(fd)
                except OSError:
                    pass
        for n, v in streams.items():
            setattr(sys, n, v)
        sys.path[:], sys.argv = path, argv
        if main_mod is not None:
            sys.modules["__main__"] = main_mod
        else:
            sys.modules.pop("__main__", None)
        for sig, h in handlers.items():
            if h is not None:
                _signal.signal(sig, h)
        for n in ("display", "__airlock__"):
            if n in had:
                setattr(builtins, n, had[n])
            else:
                vars(builtins).pop(n, None)
        # IPython's modules, the stand-in's or the real ones routed to
        # airlock's display, are a session's, made by its first execution.
        for name in set(sys.modules) - modules:
            if name.partition(".")[0] == "IPython":
                _close_files_of(sys.modules.pop(name), fds)
        display.SHIM_MODULES.clear()
        display.SHIM_MODULES.update(shims)
        sys.meta_path[:] = meta_path
        for (module, name), fn in routed.items():
            setattr(module, name, fn)
        for k in set(linecache.cache) - lines:
            del linecache.cache[k]
    driver.join()
    ours.close()
    return sent


def _open_fds() -> set[int] | None:
    try:
        return {int(fd) for fd in os.listdir("/proc/self/fd")}
    except OSError:
        return None


def _close_files_of(module: types.ModuleType, fds: set[int] | None) -> None:
    """Close the files a module the rehearsal drops opened at its import
    (IPython 8.5's utils.io opens os.devnull), or every child of the
    template inherits their descriptors. Only files on descriptors that
    were not open before the rehearsal: never a stream of the process's."""
    if fds is None:
        return
    for v in list(vars(module).values()):
        if isinstance(v, io.IOBase):
            try:
                if v.fileno() not in fds:
                    v.close()
            except (OSError, ValueError):
                pass


def main(cells: bool = False) -> None:
    """Serve fd 3, then exit 0 without waiting for user threads (the end of
    both the standalone runtime and a template's child, which passes
    ``cells``: see serve)."""
    serve(3, cells)
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    current.flush_stdio()
    os._exit(0)
