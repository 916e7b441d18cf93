"""Program mode (docs/runtime-protocol.md): run a file as ``python3 FILE
ARGS`` would, in this already warm interpreter, then exit.

The session's conveniences are taken away first (``display``, the IPython
stand-in, the runtime's ``sys.path`` entries, its ``__main__``), and what a
new interpreter has is put back: a fresh ``__main__``, ``sys.argv``,
unbuffered stdio, SIGINT as KeyboardInterrupt, matplotlib's backend as
``MPLBACKEND`` names it; at the end, what ``Py_FinalizeEx`` does. A
program run is the session's last act.
"""

from __future__ import annotations

import _signal
import builtins
import io
import os
import sys

from . import current

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc


def request(msg: dict, fatal: Callable[[str], None]) -> dict:
    """Validate a ``run`` message."""
    msg_id, argv, env, cwd = msg.get("id"), msg.get("argv"), msg.get("env"), msg.get("cwd")
    if type(msg_id) is not str:
        fatal("run needs a string 'id'")
    if type(argv) is not list or len(argv) < 2 or any(type(a) is not str or "\0" in a for a in argv):
        fatal("run: 'argv' must be the interpreter, the program and its arguments, as strings")
    if type(env) is not dict or any(type(k) is not str or type(v) is not str for k, v in env.items()):
        fatal("run: 'env' must map strings to strings")
    if cwd is not None and type(cwd) is not str:
        fatal("run: 'cwd' must be a string")
    return {"id": msg_id, "argv": argv, "env": env, "cwd": cwd, "fresh": msg.get("fresh") is True}


def run(session: Any, req: dict) -> None:
    """Run a program file as ``python3 FILE ARGS`` would, then exit.

    The interpreter is this one, forked from the template with numpy,
    pandas and matplotlib imported: the session's conveniences are taken
    away first, so the program sees a plain ``__main__``, ``sys.argv``,
    ``sys.path`` and stdio. With ``fresh`` (the client set PYTHON*
    variables, which only a new interpreter honours) a new python3 runs
    it instead. Either way exactly one ``done`` carries the exit status,
    and the process ends: a program run is the session's last act.
    """
    msg_id, argv, env, cwd = req["id"], req["argv"], req["env"], req["cwd"]
    session.begin(msg_id)
    current.flush_stdio()
    try:
        os.environ.clear()
        os.environ.update(env)
        if cwd:
            os.chdir(cwd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    except (OSError, ValueError) as e:
        os.write(2, f"airlock: cannot start {argv[1]}: {e}\n".encode("utf-8", "replace"))
        _done(session, msg_id, 127)
    if req["fresh"]:
        _done(session, msg_id, run_fresh(argv, env))
    try:
        code = run_in_process(argv[1], argv[1:])
    except BaseException as e:  # noqa: BLE001 - a runtime bug still ends with done
        try:
            os.write(2, f"airlock runtime: internal error: {type(e).__name__}: {e}\n".encode("utf-8", "replace"))
        except BaseException:  # noqa: BLE001
            pass
        code = 1
    if os.getpid() != session.pid:
        os._exit(code)  # a fork of the program returned from its main module
    _done(session, msg_id, code)


def _done(session: Any, msg_id: str, code: int) -> None:
    """Send the program's ``done``, close its stdio and exit."""
    done = {"type": "done", "id": msg_id, "status": "exited",
            "execution_count": 1, "exit_code": code}
    try:
        session.send_done(done)
    finally:
        # Nothing of the program is left to write: let the server see end
        # of file on its stdio now rather than when the process is torn down.
        for fd in (1, 2):
            try:
                os.close(fd)
            except OSError:
                pass
        os._exit(code & 0xFF)


def run_fresh(argv: list, env: dict) -> int:
    """Run argv as a new process on our stdio; its exit status, shell style."""
    try:
        pid = os.posix_spawn(argv[0], argv, env)
        _, status = os.waitpid(pid, 0)
    except OSError as e:
        os.write(2, f"airlock: cannot start {argv[0]}: {e}\n".encode("utf-8", "replace"))
        return 127
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def plain_interpreter(path: str, argv: list) -> ModuleType:
    """Take the session's conveniences away and return a fresh ``__main__``."""
    for name in ("display", "__airlock__"):
        builtins.__dict__.pop(name, None)
    display = sys.modules.get(__package__ + ".display")  # imported by executions only
    if display is not None:
        for name, mod in display.SHIM_MODULES.items():
            if sys.modules.get(name) is mod:
                del sys.modules[name]
        display.unroute_real_ipython()
    sys.displayhook = sys.__displayhook__
    sys.excepthook = sys.__excepthook__
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    # As `python3 FILE` under PYTHONUNBUFFERED: unbuffered, strict stdout.
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="strict", write_through=True)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", write_through=True)
    sys.stdin = sys.__stdin__ = current.text_stream(0, "r")
    sys.path[:] = [os.path.dirname(path)] + [p for p in sys.path if p not in ("", current.RUNTIME_DIR)]
    if sys.flags.no_site:
        _what_site_gives()
    sys.argv = list(argv)
    _plain_matplotlib(os.environ.get("MPLBACKEND") or "agg")
    main = type(sys)("__main__")  # types.ModuleType, without importing types
    main.__file__ = path
    main.__cached__ = None
    main.__builtins__ = builtins
    try:
        # importlib.machinery's, without importing importlib.
        from _frozen_importlib_external import SourceFileLoader
        main.__loader__ = SourceFileLoader("__main__", path)
    except ImportError:
        pass
    sys.modules["__main__"] = main
    return main


def _what_site_gives() -> None:
    """What ``site`` gives a program that it can see, in an interpreter
    started without it (``-S``: a lean program run on a runtime started for
    it, runtimes.Language.Lean): the builtins it adds (exit, quit, help,
    copyright, credits, license) and its site directories at the end of
    ``sys.path``, in its order. Its ``.pth`` files and ``sitecustomize`` are
    not run: what they set up (import hooks, namespace packages) is out of
    reach of code that imports only standard modules."""
    import site  # frozen; with -S, importing it runs nothing
    if sys.prefix != sys.base_prefix:
        site.main()  # a virtual environment's: as python3 FILE has it, exactly
        return
    site.setquit()
    site.setcopyright()
    site.sethelper()
    for d in site.getsitepackages():
        if d not in sys.path and os.path.isdir(d):
            sys.path.append(d)


def _plain_matplotlib(backend: str) -> None:
    """Give an imported matplotlib the backend a new process would get."""
    mpl = sys.modules.get("matplotlib")
    if mpl is None:
        return
    plt = sys.modules.get("matplotlib.pyplot")
    try:
        if plt is not None:
            plt.close("all")
        if plt is not None and getattr(plt, "_backend_mod", None) is not None:
            plt.switch_backend(backend)
        else:
            # pyplot picks the backend when first used: naming it is enough
            # (and costs nothing, unlike importing it now).
            mpl.rcParams["backend"] = backend
    except Exception:  # noqa: BLE001 - a backend the environment names may not exist
        mpl.rcParams["backend"] = "agg"


def run_in_process(path: str, argv: list) -> int:
    """Run the file as the main module and finalize as CPython does; the exit status."""
    main = plain_interpreter(path, argv)
    status, sigint = 0, False
    try:
        with open(path, "rb") as f:
            source = f.read()
        code = compile(source, path, "exec", dont_inherit=True)
        del source
        exec(code, main.__dict__)
    except SystemExit as e:
        status = _system_exit_status(e)
    except BaseException as e:  # noqa: BLE001 - whatever the program raised
        sigint = isinstance(e, KeyboardInterrupt)
        tb = e.__traceback__
        # Our own frame is the outermost one: the program's start below it.
        while tb is not None and current.is_runtime_file(tb.tb_frame.f_code.co_filename):
            tb = tb.tb_next
        try:
            sys.excepthook(type(e), e.with_traceback(tb), tb)
        except BaseException:  # noqa: BLE001
            pass
        status = 1
        e = tb = None  # noqa: F841 - drop frames before finalizing
    status = _finalize(status)
    if sigint:
        # CPython ends with SIGINT itself after an uncaught KeyboardInterrupt.
        return 128 + _signal.SIGINT
    return status


def _system_exit_status(e: SystemExit) -> int:
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except BaseException:  # noqa: BLE001
        pass
    return 1


def _finalize(status: int) -> int:
    """What Py_FinalizeEx does before exit: wait for threads, atexit, flush."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except SystemExit as e:
            status = _system_exit_status(e)
        except BaseException:  # noqa: BLE001
            pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - atexit reports errors itself
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:  # noqa: BLE001
            if status == 0:
                status = 120
    return status


