package e2e

import (
	"strings"
	"testing"
)

// Real programs run unchanged in sessions too, where Python runtimes are
// forked from the template: a script in /tmp runs, a pty works, and a
// program started on it sees a terminal.
func TestSessionsRunRealPrograms(t *testing.T) { testSessionsRunRealPrograms(t, sharedServer(t)) }

func testSessionsRunRealPrograms(t *testing.T, s *server) {
	for _, tc := range []struct{ lang, code string }{
		{"python", `import os, pty, shutil, subprocess
with open("/tmp/tool", "w") as f:
    f.write("#!/bin/sh\necho tool ran\n")
os.chmod("/tmp/tool", 0o755)
print(subprocess.run(["/tmp/tool"], capture_output=True, text=True).stdout.strip())
os.environ["PATH"] = "/tmp:" + os.environ["PATH"]
print(shutil.which("tool"))
m, s = os.openpty()
print(os.ttyname(s).startswith("/dev/pts/"), os.isatty(s))
pid, fd = pty.fork()
if pid == 0:
    os.execv("/bin/sh", ["sh", "-c", "test -t 1 && echo on a tty"])
out = b""
while True:
    try:
        b = os.read(fd, 100)
    except OSError:
        break
    if not b:
        break
    out += b
os.waitpid(pid, 0)
print(out.decode().strip())`},
		{"bash", `printf '#!/bin/sh\necho tool ran\n' > /tmp/tool; chmod +x /tmp/tool; /tmp/tool
PATH=/tmp:$PATH command -v tool
python3 -c 'import os; m, s = os.openpty(); print(os.ttyname(s).startswith("/dev/pts/"), os.isatty(s))'
script -qc 'test -t 1 && echo on a tty' /dev/null | tr -d '\r'`},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			id := s.newSession(tc.lang, nil)
			r := s.exec(id, tc.code)
			want := "tool ran\n/tmp/tool\nTrue True\non a tty"
			if got := strings.TrimSpace(r.Stdout); got != want || r.Error != nil {
				t.Fatalf("got %q, want %q; stderr %q error %+v", got, want, r.Stderr, r.Error)
			}
		})
	}
}
