"""The Python template interpreter ("zygote") of airlock.

It runs outside every sandbox, as host root with a handful of capabilities,
in private mount/network/ipc/uts namespaces whose root filesystem is laid out
exactly like a sandbox's (so everything it loads has the paths a sandbox
sees). It imports the heavy libraries once; then, for every new sandbox, it
forks a child that:

  1. moves itself into the sandbox's cgroup (descriptors opened by the host),
  2. enters all of the sandbox's namespaces at once (setns on a pidfd of the
     sandbox's init), and forks again so that the grandchild is inside the
     sandbox's pid namespace;
and the grandchild then, before running anything else:
  3. takes the runtime's descriptors as 0-3 and closes every other one,
  4. makes the sandbox entry the server sent with the request (jail.Entry,
     planned in Go and the same as the init's programs get): every step
     in its order (rlimits, the capability sets, no_new_privs, Landlock,
     seccomp, a session of its own, the sandbox user, /workspace), then
     reads back /proc/self/status and runs the plan's probes (Landlock's),
     exiting with the reason if anything differs. This module decides
     nothing about the entry: it only knows how to make each kind of step;
  5. serves the session protocol (airlock_runtime.serve).

The zygote never executes code it receives: requests carry only descriptors
and numbers from the airlock server. Anything that goes wrong in a child
ends that child, never the zygote.

Trade-offs (documented in the threat model): every session forked from one
zygote shares its address-space layout (ASLR is per zygote, not per
session) and its hash seed; random generators are reseeded in each child.
"""

import _signal
import array
import base64
import ctypes
import gc
import importlib
import json
import os
import re
import resource  # here, not in the child: an import there copies ~0.9 MB
import select
import signal
import socket
import struct
import sys
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
JOIN = (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
        CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_NEWPID)

PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_SET_MODE_FILTER = 1
CAP_VERSION_3 = 0x20080522

MAX_FDS = 32
MAX_MSG = 1 << 20

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.prctl.restype = ctypes.c_int


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


# Made once here: ctypes makes an array type on first use, in the child.
CapData2 = CapData * 2


def check(ret, what):
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, "%s: %s" % (what, os.strerror(err)))
    return ret


class Zygote:
    def __init__(self, sock):
        self.sock = sock
        self.cfg = {}
        self.pid = os.getpid()
        # To point pid_for_children back at our own namespace after a fork.
        self.self_pidfd = os.pidfd_open(self.pid)
        os.set_inheritable(self.self_pidfd, False)

    def send(self, msg, fds=()):
        data = json.dumps(msg).encode()
        anc = []
        if fds:
            anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        self.sock.sendmsg([data], anc)

    def recv(self):
        fds = array.array("i")
        msg, anc, flags, _ = self.sock.recvmsg(MAX_MSG, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
        for level, typ, data in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - (len(data) % fds.itemsize)])
        if not msg:
            for fd in fds:
                os.close(fd)
            return None, []
        for fd in fds:
            os.set_inheritable(fd, False)
        return json.loads(msg), list(fds)

    def configure(self, cfg):
        self.cfg = cfg
        errors = {}
        for name in cfg.get("preload", []):
            try:
                importlib.import_module(name)
            except Exception as e:  # a missing package must not stop the template
                errors[name] = "%s: %s" % (type(e).__name__, e)
        import airlock_runtime
        airlock_runtime.preload()  # loaded once, shared by every child
        preloaded = [n for n in cfg.get("preload", []) if n not in errors]

        def warm():
            self.warm_up()
            self.rehearse(preloaded)
        warm()
        try:
            self.packed = pack_code(warm)
        except Exception:  # only costs speed
            traceback.print_exc()
        # Once more: the copies start cold (not yet specialised), and so
        # do the call sites that called the functions they replace.
        warm()
        # Objects that exist now are shared copy-on-write with every child:
        # keep the cycle collector from touching (and so copying) them.
        gc.collect()
        gc.freeze()
        try:
            self.filler = fill_holes()
        except Exception:  # only costs memory
            traceback.print_exc()
        return errors

    def warm_up(self):
        """Runs what a session's first execution typically runs (a small
        DataFrame, its sum, both formatted as the runtime sends them), so
        that the lazy imports and caches this fills belong to the template,
        shared by every child, instead of costing each child its first
        execution. It leaves nothing behind but those."""
        try:
            import airlock_runtime
            values = [1, "text", [1, 2], list(range(40))]  # the last: pprint
            pd = sys.modules.get("pandas")
            if pd is not None:
                df = pd.DataFrame({"a": [1, 2], "b": [0.5, 1.5]})
                ints = pd.DataFrame({"a": [1, 2]})  # a frame of one dtype sums another way
                values += [df, df.sum(), df.describe(), ints, ints.sum()]
            for v in values:
                airlock_runtime.format_display_data(v)
        except Exception:  # a warm-up that fails only costs speed
            pass

    def rehearse(self, preloaded):
        """Runs a throwaway session here, as every child runs its first
        executions (airlock_runtime.session.rehearse: an import of what
        was preloaded, a statement, a value), so that the one-time set-up
        of a session's executions is made once and shared, instead of
        written into every child's own pages. Nothing of it reaches a
        child but that set-up and the caches it fills."""
        try:
            import airlock_runtime
            cells = ["import " + ", ".join(preloaded)] if preloaded else []
            airlock_runtime.session.rehearse(cells + ["_rehearsal = [1, 2]", "sum(_rehearsal)"])
        except Exception:  # a rehearsal that fails only costs memory
            traceback.print_exc()

    def serve(self):
        cfg, fds = self.recv()
        if cfg is None or cfg.get("type") != "config":
            sys.exit(2)
        errors = self.configure(cfg)
        # Every runtime is our child: reap it as soon as it ends, since a
        # zombie keeps its cgroup busy and its pid namespace (and so its
        # init, and the server's teardown) from ending. A Python signal
        # handler alone would not do: a SIGCHLD that lands after it last
        # called waitpid but before the loop blocks in recvmsg again waits
        # for the next message. The C handler writes the wakeup pipe, which
        # the loop below waits on; and it reaps once a second regardless.
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.send({"type": "ready", "pid": os.getpid(), "errors": errors})
        while True:
            ready, _, _ = select.select([self.sock, wake_r], [], [], 1.0)
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
            self.reap()
            if self.sock not in ready:
                continue
            msg, fds = self.recv()
            if msg is None:
                return
            if msg.get("type") != "fork":
                for fd in fds:
                    os.close(fd)
                continue
            try:
                pid = self.fork_into(msg, fds)
            except BaseException as e:
                pid = None
                err = "%s: %s" % (type(e).__name__, e)
            if pid == 0:  # the runtime, inside the sandbox's pid namespace
                try:
                    self.runtime(msg, fds)
                finally:
                    os._exit(70)
            for fd in fds:
                os.close(fd)
            if pid is None:
                self.send({"type": "fork_error", "id": msg.get("id"), "error": err})
                continue
            if self.cfg.get("die_after_fork"):  # a test's fault: die before the reply
                os.kill(os.getpid(), signal.SIGKILL)
            pfd = os.pidfd_open(pid)
            try:
                self.send({"type": "forked", "id": msg["id"], "pid": pid}, [pfd])
            finally:
                os.close(pfd)

    def fork_into(self, req, fds):
        """Forks the runtime straight into the sandbox's pid namespace.

        The template points its pid_for_children at the sandbox's namespace
        (through the init's pidfd), forks, and points it back at its own
        at once: one fork, no intermediate process, and the runtime is the
        template's own child, reaped here when it ends.
        """
        nprocs = int(req["nprocs"])
        want = 1 + nprocs + (1 if req.get("landlock") else 0) + 4
        if len(fds) != want:
            raise ValueError("got %d descriptors, want %d" % (len(fds), want))
        check(libc.syscall(self.cfg["nr_setns"], fds[0], CLONE_NEWPID), "setns pid")
        try:
            pid = os.fork()
        except BaseException:
            self.restore_pidns()
            raise
        if pid != 0:
            self.restore_pidns()
        return pid

    def restore_pidns(self):
        # Should this ever fail, the next fork would land in the wrong
        # sandbox: die instead, and let the server start a new template.
        if libc.syscall(self.cfg["nr_setns"], self.self_pidfd, CLONE_NEWPID) != 0:
            os._exit(1)

    def reap(self):
        """Reaps ended runtimes and tells the server how each ended (a
        runtime is our child, not its sandbox's init's)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            try:
                self.send({"type": "exited", "pid": pid, "status": status})
            except OSError:
                pass

    def runtime(self, req, fds):
        """The child: joins the sandbox and becomes its session runtime.

        Nothing here may touch the template's socket: the first thing done
        is to put the runtime's own descriptors on 0-3, so that fd 3 (and
        fail()) is the runtime's control socket from then on.
        """
        # The template's wakeup pipe is closed below; signals must not be
        # written to whatever file later gets its number.
        signal.set_wakeup_fd(-1)
        nprocs = int(req["nprocs"])
        pidfd = fds[0]
        procs = fds[1:1 + nprocs]
        rest = fds[1 + nprocs:]
        ruleset = rest.pop(0) if req.get("landlock") else -1
        for target, fd in enumerate(rest):
            os.dup2(fd, target, inheritable=True)
        try:
            # First into the sandbox's cgroup, so that what this process
            # allocates from now on is charged (and limited) there, then
            # into the rest of its namespaces (it is in the pid one).
            for fd in procs:
                os.write(fd, b"0")
            check(libc.syscall(self.cfg["nr_setns"], pidfd, JOIN & ~CLONE_NEWPID), "setns")
            keep = {0, 1, 2, 3}
            if ruleset >= 0:
                # Park the ruleset where the range close below misses it.
                os.dup2(ruleset, 4, inheritable=False)
                ruleset = 4
                keep.add(4)
            os.closerange(max(keep) + 1, 1 << 20)
            # _signal's, not signal's: the latter turns every old handler
            # into an enum, an exception for most, all of it in the child.
            for sig in range(1, _signal.NSIG):
                if sig in (_signal.SIGKILL, _signal.SIGSTOP):
                    continue
                try:
                    _signal.signal(sig, _signal.SIG_DFL)
                except (OSError, ValueError, RuntimeError):
                    pass
            enter(req["entry"], ruleset)
        except BaseException as e:
            # Nothing has run yet; say why, in the session protocol, and stop.
            self.fail("%s: %s" % (type(e).__name__, e))
        if ruleset >= 0:
            os.close(ruleset)
        self.reseed()
        if self.cfg.get("warm"):
            warm_child()
        import airlock_runtime
        # As the standalone runtime ends (atexit, flush, exit); ready for
        # cells before its hello, while it waits in its pool.
        airlock_runtime.main(cells=True)

    def fail(self, why):
        frame = json.dumps({"type": "error", "name": "JailError", "value": why}).encode()
        try:
            os.write(3, struct.pack(">I", len(frame)) + frame)
        finally:
            os._exit(3)

    def reseed(self):
        # Every child starts from the same memory image: give each its own
        # random state (random reseeds itself on os.fork; numpy does not).
        from airlock_runtime import current
        current.reseed(stdlib=False)


def pack_code(run):
    """Runs run() and gives every function it called a copy of its code
    object, made now, one after the other, so that the code a session's
    first executions run sits on few pages instead of being scattered
    over the template's memory among everything imported with it.

    Calling a function writes its code object (a reference count, the
    warm-up counter and inline caches of the bytecode), so every page
    holding one is copied into the child that calls it: measured on a
    first `pd.DataFrame({'a': [1, 2]}).sum()`, code objects were on 390
    of its 936 copied pages. Packed, the first execution copies about
    15 % fewer pages. The copies are equal to the originals (replace()
    with no changes: same bytecode, constants, names, file and lines);
    only their identity and address differ. Returns the number of
    functions given a copy."""
    hot = {}

    def profile(frame, event, arg):
        if event == "call":
            hot[id(frame.f_code)] = frame.f_code
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    # The copies go into fresh pools of the allocator, not into holes
    # left among other objects; kept for good (fill_holes).
    global _pack_filler
    _pack_filler = fill_holes()
    copies = {}
    n = 0
    for f in gc.get_objects():
        if type(f) is not types.FunctionType or id(f.__code__) not in hot:
            continue
        code = f.__code__
        copy = copies.get(id(code))
        if copy is None:
            copy = copies[id(code)] = code.replace()
        f.__code__ = copy
        n += 1
    return n


_pack_filler = None


def malloc_holes():
    """{block size: free blocks} in the partly used pools of Python's small
    object allocator (sys._debugmallocstats' table); {} when it has no
    such table (another allocator, another format)."""
    fd = os.memfd_create("mallocstats", os.MFD_CLOEXEC)
    saved = os.dup(2)
    try:
        sys.stderr.flush()
        os.dup2(fd, 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
        os.lseek(fd, 0, os.SEEK_SET)
        text = b"".join(iter(lambda: os.read(fd, 1 << 16), b"")).decode("ascii", "replace")
    finally:
        os.close(saved)
        os.close(fd)
    table = re.search(r"^class +size +num pools +blocks in use +avail blocks\n-[- ]+\n((?: *\d+ +\d+ +\d+ +\d+ +\d+\n)+)", text, re.M)
    if table is None:
        return {}
    holes = {}
    for line in table.group(1).splitlines():
        _, size, _, _, avail = map(int, line.split())
        holes[size] = avail
    return holes


def fill_holes(holes=None):
    """Fills the free blocks of the allocator's partly used pools with
    objects kept for good, and returns them. The template's objects
    leave such holes all over its memory; without this, what a child
    allocates lands in them, one object per page, each page then copied
    into the child; so does what the template allocates between forks.
    Filled, new objects go to pools of their own, packed: measured, 0.1
    to 0.25 MB less per child. Costs the template the holes' size
    (about 0.3 MB, once)."""
    if holes is None:
        holes = malloc_holes()
    keep = [None] * len(holes)  # sized up front: no list grows (and frees) here
    for n, (size, avail) in enumerate(holes.items()):
        objs = keep[n] = [None] * avail
        for i in range(avail):
            if size == 16:
                objs[i] = object()
            elif size == 32:
                objs[i] = float(i)  # 24 bytes
            elif size >= 48:
                objs[i] = bytes(size - 33)  # a header of 33 bytes
    return keep


# The sandbox entry (jail.Entry, see internal/jailinit/entry.go). One function
# per kind of step, each one system call with the step's own arguments;
# which steps, in which order, with which values, is the plan's business.

def _rlimit(step, nr, ruleset):
    resource.setrlimit(step["resource"], (step["cur"], step["max"]))


def _cap_bounding_drop(step, nr, ruleset):
    for cap in step["caps"]:
        check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "capability %d" % cap)


def _cap_ambient_clear(step, nr, ruleset):
    check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "prctl")


def _cap_inheritable_clear(step, nr, ruleset):
    hdr = CapHeader(CAP_VERSION_3, 0)
    data = CapData2()
    check(libc.syscall(nr["capget"], ctypes.byref(hdr), ctypes.byref(data)), "capget")
    data[0].inheritable = data[1].inheritable = 0
    check(libc.syscall(nr["capset"], ctypes.byref(hdr), ctypes.byref(data)), "capset")


def _no_new_privs(step, nr, ruleset):
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")


def _landlock_restrict_self(step, nr, ruleset):
    if ruleset < 0:
        raise RuntimeError("no Landlock ruleset was sent")
    check(libc.syscall(nr["landlock_restrict_self"], ruleset, 0), "landlock_restrict_self")


def _seccomp_filter(step, nr, ruleset):
    prog = base64.b64decode(step["filter"])
    if not prog or len(prog) % 8:
        raise RuntimeError("a filter of %d bytes" % len(prog))
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = SockFprog(len(prog) // 8, ctypes.addressof(buf))
    check(libc.syscall(nr["seccomp"], SECCOMP_SET_MODE_FILTER, 0, ctypes.byref(fprog)), "seccomp")


def _set_gid(step, nr, ruleset):
    os.setresgid(step["id"], step["id"], step["id"])


def _set_uid(step, nr, ruleset):
    os.setresuid(step["id"], step["id"], step["id"])


def _cap_clear(step, nr, ruleset):
    hdr = CapHeader(CAP_VERSION_3, 0)
    data = CapData2()
    check(libc.syscall(nr["capset"], ctypes.byref(hdr), ctypes.byref(data)), "capset")


STEPS = {
    "rlimit": _rlimit,
    "cap_bounding_drop": _cap_bounding_drop,
    "cap_ambient_clear": _cap_ambient_clear,
    "cap_inheritable_clear": _cap_inheritable_clear,
    "no_new_privs": _no_new_privs,
    "landlock_restrict_self": _landlock_restrict_self,
    "seccomp_filter": _seccomp_filter,
    "setsid": lambda step, nr, ruleset: os.setsid(),
    "setgroups": lambda step, nr, ruleset: os.setgroups([]),
    "set_gid": _set_gid,
    "set_uid": _set_uid,
    "cap_clear": _cap_clear,
    "chdir": lambda step, nr, ruleset: os.chdir(step["path"]),
    "dumpable": lambda step, nr, ruleset: check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl"),
}


def enter(plan, ruleset):
    """Makes every step of the plan, in order, then verifies the end state
    the plan expects; raises (and so refuses the start) on anything else."""
    nr = plan["syscalls"]
    for step in plan["steps"]:
        fn = STEPS.get(step["op"])
        if fn is None:
            raise RuntimeError("entry step %r: unknown" % step["op"])
        try:
            fn(step, nr, ruleset)
        except OSError as e:
            raise RuntimeError("entry step %s: %s" % (step["op"], e)) from None
    verify(plan["expect"], nr)


def verify(expect, nr):
    status = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            status[k] = v.strip()
    for k in sorted(expect["status"]):
        v = expect["status"][k]
        if status.get(k) != v:
            raise RuntimeError("refusing to run: the program's %s is %r, want %r" % (k, status.get(k), v))
    owner = os.stat("/proc/self").st_uid
    if owner != expect["proc_owner"]:
        raise RuntimeError("refusing to run: the program's /proc entries belong to %d, want %d" % (owner, expect["proc_owner"]))
    for p in expect.get("probes") or []:
        if p["op"] != "mknodat":
            raise RuntimeError("entry: unknown probe %r" % p["op"])
        path = os.path.join(p["dir"], p["prefix"] + os.urandom(8).hex())
        ctypes.set_errno(0)
        r = libc.syscall(nr["mknodat"], ctypes.c_int(-100), path.encode(), ctypes.c_uint(p["mode"]),
                         ctypes.c_uint(p["dev"]))
        err = ctypes.get_errno() if r < 0 else 0
        if r == 0:
            os.unlink(path)
        if err != p["errno"]:
            raise RuntimeError("refusing to run: %s is not enforced (mknodat %s: %s, want %s)" % (
                p["layer"], path, os.strerror(err) if err else "success", os.strerror(p["errno"])))


def warm_child():
    """pool.warm_runtimes: a child takes its copy-on-write faults and
    first-call work for a small DataFrame and its sum, formatted as
    results are, while it waits in its pool, instead of in its session's
    first execution (about 1.6 MB more private memory after a pandas
    cell, 4 MB for a session that never uses pandas). Lighter than the
    template's warm_up (no describe(), no pprint), whose cost every
    child would pay. It leaves nothing behind."""
    try:
        import airlock_runtime
        pd = sys.modules.get("pandas")
        if pd is not None:
            df = pd.DataFrame({"a": [1, 2], "b": [0.5, 1.5]})
            for v in (df, df.sum()):
                airlock_runtime.format_display_data(v)
    except Exception:  # a warm-up that fails only costs speed
        pass


def main():
    sys.path.insert(0, HERE)
    sock = socket.socket(fileno=3)
    try:
        Zygote(sock).serve()
    except Exception:
        traceback.print_exc()
        sys.exit(1)


if __name__ == "__main__":
    main()
