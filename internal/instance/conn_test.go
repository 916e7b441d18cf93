package instance

import (
	"encoding/binary"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/runtimes"
)

// fakeRuntime answers the framed protocol from the other end of a
// socketpair: hello, then configured with the given error.
func fakeRuntime(t *testing.T, configErr string) *framedConn {
	t.Helper()
	return fakeRuntimeReply(t, runtimes.Message{Type: "configured", Error: configErr})
}

// fakeRuntimeReply is fakeRuntime answering the configure with reply.
func fakeRuntimeReply(t *testing.T, reply runtimes.Message) *framedConn {
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
		w.Write(reply)
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

// A reseed is confirmed only by a runtime that says so: one older than
// the reseed answers configured without reseeded, and the fork says its
// generators are its source's.
func TestReseedConfirmed(t *testing.T) {
	for _, tc := range []struct {
		reply runtimes.Message
		ok    bool
	}{
		{runtimes.Message{Type: "configured", Reseeded: true}, true},
		{runtimes.Message{Type: "configured"}, false},
	} {
		ok, err := fakeRuntimeReply(t, tc.reply).reseed()
		if err != nil || ok != tc.ok {
			t.Errorf("reply %+v: %v %v, want %v", tc.reply, ok, err, tc.ok)
		}
	}
}

// An interrupt goes on the control socket after its execution (the
// runtime reads it even when the SIGINT that follows found it idle): the
// framed protocol's interrupt message, the shell's mark (a block of no
// bytes; an empty cell goes as a blank, never as a mark).
func TestInterruptFollowsExecution(t *testing.T) {
	pair := func() (*os.File, *os.File) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, b := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
		t.Cleanup(func() { a.Close(); b.Close() })
		b.SetReadDeadline(time.Now().Add(10 * time.Second)) // what is missing fails, not hangs
		return a, b
	}
	t.Run("framed", func(t *testing.T) {
		ours, theirs := pair()
		c := &framedConn{f: ours, w: runtimes.NewFrameWriter(ours)}
		if err := c.execute("e1", "while True: pass", nil); err != nil {
			t.Fatal(err)
		}
		if err := c.interrupt("e1"); err != nil {
			t.Fatal(err)
		}
		var got []string
		for range 2 {
			var hdr [4]byte
			if _, err := io.ReadFull(theirs, hdr[:]); err != nil {
				t.Fatal(err)
			}
			body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
			if _, err := io.ReadFull(theirs, body); err != nil {
				t.Fatal(err)
			}
			got = append(got, string(body))
		}
		if got[0] != `{"type":"execute","id":"e1","code":"while True: pass"}` || got[1] != `{"type":"interrupt","id":"e1"}` {
			t.Errorf("on the socket: %q", got)
		}
	})
	t.Run("bash", func(t *testing.T) {
		ours, theirs := pair()
		c := &bashConn{f: ours, ids: make(chan string, 1)}
		if err := c.execute("e1", "", nil); err != nil {
			t.Fatal(err)
		}
		<-c.ids
		if err := c.execute("e2", "sleep 9", nil); err != nil {
			t.Fatal(err)
		}
		if err := c.interrupt("e2"); err != nil {
			t.Fatal(err)
		}
		want := " \x00sleep 9\x00\x00"
		got := make([]byte, len(want))
		if _, err := io.ReadFull(theirs, got); err != nil || string(got) != want {
			t.Errorf("on the socket: %q %v, want %q", got, err, want)
		}
	})
}
