package gvisor

import (
	"net"
	"reflect"
	"syscall"
	"testing"
	"time"
)

// failingListener fails its first accepts with err, then is closed.
type failingListener struct {
	net.Listener
	fails int
	err   error
	calls int
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.calls++
	if l.calls <= l.fails {
		return nil, l.err
	}
	return nil, net.ErrClosed
}

// A keeper whose accept keeps failing waits longer each time, up to a
// second, instead of spinning; a closed listener ends its loop.
func TestKeeperAcceptBacksOff(t *testing.T) {
	var slept []time.Duration
	k := &keeper{kids: map[int]*kept{}, sleep: func(d time.Duration) { slept = append(slept, d) }}
	ln := &failingListener{fails: 10, err: &net.OpError{Op: "accept", Err: syscall.EMFILE}}
	k.accept(ln) // returns: the listener ends closed
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !reflect.DeepEqual(slept, want) || ln.calls != 11 {
		t.Errorf("%d accepts, pauses %v, want %v", ln.calls, slept, want)
	}
}
