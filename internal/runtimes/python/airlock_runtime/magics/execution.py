"""Running and timing code (IPython's ``core/magics/execution.py``):
``%time``, ``%timeit``, ``%run``, ``%%time``, ``%%timeit``, ``%%capture``."""

from __future__ import annotations

import ast
import builtins
import io
import os
import sys
import types
from typing import Any, Callable, Optional

from ..display import publish_display_data
from ..tracebacks import UsageError
from .magic import MagicFamily, cell_magic, line_magic

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc


def _format_time(seconds: float, precision: int = 3) -> str:
    """Like IPython's _format_time: '1.23 ms', '4.5 µs', '1min 3s'."""
    if seconds >= 60.0:
        parts, value = [], seconds
        for suffix, length in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
            amount = int(value // length)
            if amount:
                value -= amount * length
                parts.append(f"{amount}{suffix}")
        return " ".join(parts)
    units, scaling = ["s", "ms", "\u00b5s", "ns"], [1, 1e3, 1e6, 1e9]
    if seconds > 0.0:
        import math
        order = min(-int(math.floor(math.log10(seconds)) // 3), 3)
    else:
        order = 3
    return "%.*g %s" % (precision, seconds * scaling[order], units[order])


def _timed(fn: Callable[[], Any]) -> Any:
    import time
    t0, c0 = time.perf_counter(), os.times()
    try:
        return fn()
    finally:
        c1, wall = os.times(), time.perf_counter() - t0
        user, sys_ = c1.user - c0.user, c1.system - c0.system
        print(f"CPU times: user {_format_time(user)}, sys: {_format_time(sys_)}, "
              f"total: {_format_time(user + sys_)}\nWall time: {_format_time(wall)}")


def _timer(compiler: Any, stmt: str, setup: str, ns: dict) -> Any:
    """A timeit.Timer whose statement is compiled with the session's
    futures (timeit's own compile has none), as IPython's %timeit uses its
    shell's compiler."""
    import timeit
    timer = timeit.Timer(stmt, setup, globals=ns)  # checks stmt and setup, as timeit does
    src = timeit.template.format(stmt=timeit.reindent(stmt, 8), setup=timeit.reindent(setup, 4), init="")
    local: dict = {}
    exec(compiler(src, "<timeit-src>", "exec"), ns, local)
    timer.inner = local["inner"]
    return timer


def _timeit(compiler: Any, arg: str, setup: str, frame: types.FrameType, stmt: Optional[str] = None) -> Any:
    number, repeat, quiet, ret = None, None, False, False
    words = arg.split(" ")
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("-n", "-r") and i + 1 < len(words):
            if w == "-n":
                number = int(words[i + 1])
            else:
                repeat = int(words[i + 1])
            i += 2
        elif w == "-q":
            quiet, i = True, i + 1
        elif w == "-o":
            ret, i = True, i + 1
        elif w == "":
            i += 1
        else:
            break
    rest = " ".join(words[i:])
    if stmt is None:
        stmt = rest
    elif rest.strip():
        setup = rest
    if not stmt.strip():
        raise UsageError("%timeit needs a statement")
    ns = dict(frame.f_globals)
    ns.update(frame.f_locals)
    timer = _timer(compiler, stmt, setup, ns)
    times: list[float] = []
    if number is None:
        number = 1
        while True:
            t = timer.timeit(number)
            if t >= 0.1 or number >= 10 ** 9:
                break
            number *= 10
        times.append(t / number)
    # Without -n the whole measurement stays around a second.
    budget = 1.0 if times else None
    target = repeat or 7
    spent = sum(times) * number
    while len(times) < target and (budget is None or spent < budget or repeat):
        t = timer.timeit(number)
        spent += t
        times.append(t / number)
    mean = sum(times) / len(times)
    std = (sum((t - mean) ** 2 for t in times) / len(times)) ** 0.5
    if not quiet:
        runs = len(times)
        print(f"{_format_time(mean)} \u00b1 {_format_time(std)} per loop (mean \u00b1 std. dev. "
              f"of {runs} run{'s' if runs != 1 else ''}, {number:,} loop{'s' if number != 1 else ''} each)")
    if ret:
        return types.SimpleNamespace(average=mean, stdev=std, loops=number, repeat=len(times),
                                     all_runs=[t * number for t in times],
                                     best=min(times), worst=max(times))
    return None


class CapturedIO:
    """What ``%%capture VAR`` stores: .stdout, .stderr, .outputs and .show()."""

    def __init__(self, stdout: str, stderr: str, outputs: list) -> None:
        self.stdout, self.stderr, self.outputs = stdout, stderr, outputs

    def show(self) -> None:
        sys.stdout.write(self.stdout)
        sys.stderr.write(self.stderr)
        for data, md in self.outputs:
            publish_display_data(data, md)

    __call__ = show

    def __repr__(self) -> str:
        return "<airlock CapturedIO>"


class ExecutionMagics(MagicFamily):
    @line_magic("time")
    def time(self, arg: str, frame: types.FrameType) -> Any:
        """%time STATEMENT: run it once and print CPU and wall times."""
        if not arg.strip():
            raise UsageError("%time needs a statement")
        compiler = self.session.compiler
        tree = compiler.ast_parse(arg, "<timed exec>")
        if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr):
            code = compiler(ast.Expression(tree.body[0].value), "<timed eval>", "eval")
        else:
            code = compiler(tree, "<timed exec>", "exec")
        return _timed(lambda: eval(code, frame.f_globals, frame.f_locals))

    @line_magic("timeit")
    def timeit(self, arg: str, frame: types.FrameType) -> Any:
        """%timeit [-n N] [-r R] [-q] [-o] STATEMENT: time a statement (short)."""
        return _timeit(self.session.compiler, arg, "pass", frame)

    @line_magic("run")
    def run(self, arg: str, frame: types.FrameType) -> None:
        """%run [-i] SCRIPT [ARGS]: run a file as __main__; its globals are kept."""
        import shlex
        argv = shlex.split(arg)
        interactive = bool(argv) and argv[0] == "-i"
        if interactive:
            argv = argv[1:]
        if not argv:
            raise UsageError("%run needs a file name")
        path = os.path.expanduser(argv[0])
        if not os.path.exists(path) and os.path.exists(path + ".py"):
            path += ".py"
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
        session = self.session
        if interactive:
            g = session.ns
            module = None
        else:
            module = types.ModuleType("__main__")
            g = module.__dict__
            g.update({"__file__": path, "__builtins__": builtins})
        saved_argv, saved_main = sys.argv, sys.modules.get("__main__")
        sys.argv = [path] + argv[1:]
        if module is not None:
            sys.modules["__main__"] = module
        try:
            exec(code, g)
        finally:
            sys.argv = saved_argv
            if module is not None:
                sys.modules["__main__"] = saved_main
                for k, v in g.items():
                    if k not in ("__name__", "__file__", "__builtins__", "__doc__",
                                 "__loader__", "__spec__", "__package__"):
                        session.ns[k] = v

    @cell_magic("time")
    def time_cell(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> Any:
        """%%time: run the cell and print its CPU and wall times."""
        return _timed(lambda: self.session.run_nested(body, body_lineno))

    @cell_magic("timeit")
    def timeit_cell(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> Any:
        """%%timeit [options] [SETUP]: time the cell body."""
        return _timeit(self.session.compiler, line, "pass", frame, stmt=body)

    @cell_magic("capture")
    def capture(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%capture [--no-stdout] [--no-stderr] [--no-display] [VAR]: capture Python-level output."""
        words = line.split()
        var = next((w for w in words if not w.startswith("-")), None)
        out, err = io.StringIO(), io.StringIO()
        outputs: list = []
        saved = sys.stdout, sys.stderr
        if "--no-stdout" not in words:
            sys.stdout = out
        if "--no-stderr" not in words:
            sys.stderr = err
        session = self.session
        capturing = "--no-display" not in words
        if capturing:
            session.captures.append(outputs)
        try:
            session.run_nested(body, body_lineno)
        finally:
            if capturing:
                session.captures.pop()
            sys.stdout, sys.stderr = saved
        if var:
            frame.f_globals[var] = CapturedIO(out.getvalue(), err.getvalue(), outputs)
