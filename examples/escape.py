# A few things untrusted code might try. Every one of them fails.
import ctypes, os, socket

def attempt(what, fn):
    try:
        result = fn()
        print(f"{what}: SUCCEEDED ({result!r})")
    except Exception as e:
        print(f"{what}: blocked ({type(e).__name__}: {e})")

libc = ctypes.CDLL(None, use_errno=True)

def errno_call(fn, *args):
    if fn(*args) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return "ok"

attempt("read the host's /etc/shadow", lambda: open("/etc/shadow").read())
attempt("write outside /workspace", lambda: open("/usr/bin/evil", "w"))
print("processes visible (only the sandbox's init and this one):", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
attempt("read the init's environment", lambda: open("/proc/1/environ").read())
attempt("connect to the internet", lambda: socket.create_connection(("1.1.1.1", 80), timeout=2))
attempt("mount a filesystem", lambda: errno_call(libc.mount, b"none", b"/tmp", b"tmpfs", 0, None))
if "gvisor" in os.uname().release:
    # gVisor's own kernel implements namespaces: one made there is gVisor's,
    # never the host's (and this process would leave its uid behind).
    print("create a user namespace: gVisor's own kernel only, not tried")
else:
    attempt("create a user namespace", lambda: errno_call(libc.unshare, 0x10000000))
attempt("ptrace the init", lambda: errno_call(libc.ptrace, 16, 1, None, None))
attempt("open a raw socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
print("running as uid", os.getuid(), "in", os.getcwd())
