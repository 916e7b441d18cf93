package instance

import (
	"encoding/binary"
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"airlock/internal/runtimes"
)

// fakeRuntime answers the framed protocol from the other end of a
// socketpair: hello, then configured with the given error.
func fakeRuntime(t *testing.T, configErr string) *framedConn {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	t.Cleanup(func() { theirs.Close() })
	go func() {
		w := runtimes.NewFrameWriter(theirs)
		w.Write(runtimes.Message{Type: "hello", Language: "python", Pid: 2})
		// The configure request (FrameReader reads only what runtimes send).
		var hdr [4]byte
		if _, err := io.ReadFull(theirs, hdr[:]); err != nil {
			return
		}
		if _, err := io.ReadFull(theirs, make([]byte, binary.BigEndian.Uint32(hdr[:]))); err != nil {
			return
		}
		w.Write(runtimes.Message{Type: "configured", Error: configErr})
	}()
	c, err := newFramedConn(ours, runtimes.MaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

// A runtime that could not take its environment or directory is not
// used: its configured error fails the configuration.
func TestConfigureError(t *testing.T) {
	for _, tc := range []struct{ reply, want string }{
		{"", ""},
		{"cannot change directory to '/workspace': No such file or directory", "could not be configured: cannot change directory"},
	} {
		err := fakeRuntime(t, tc.reply).configure(map[string]string{"A": "1"}, "/workspace")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("reply %q: %v", tc.reply, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("reply %q: got %v, want %q", tc.reply, err, tc.want)
		}
	}
}
