package egress

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// holder is an upstream handler (/wait) that holds every request until
// let is closed, counting those that arrived.
type holder struct {
	arrived, cancelled atomic.Int64
	let                chan struct{}
	once               sync.Once
}

func newHolder() *holder { return &holder{let: make(chan struct{})} }

func (h *holder) handlers(mux *http.ServeMux) {
	mux.HandleFunc("/wait", func(w http.ResponseWriter, r *http.Request) {
		h.arrived.Add(1)
		select {
		case <-h.let:
		case <-r.Context().Done():
			h.cancelled.Add(1)
		}
		io.WriteString(w, "done")
	})
}

func (h *holder) release() { h.once.Do(func() { close(h.let) }) }

// outcome is one request's outcome.
type outcome struct {
	status int
	body   string
	err    error
}

// h2Client is a client in the sandbox speaking HTTP/2 to bound hosts,
// on one connection.
func (f *secretsFixture) h2Client() *http.Client {
	c := f.ns.client(&tls.Config{RootCAs: f.anchor, NextProtos: []string{"h2"}})
	c.Timeout = 20 * time.Second
	tr := c.Transport.(*http.Transport)
	tr.ForceAttemptHTTP2, tr.MaxConnsPerHost = true, 1
	return c
}

// parallel sends n GETs of u at once with c; their answers come on the
// returned channel.
func parallel(c *http.Client, u string, n int) <-chan outcome {
	out := make(chan outcome, n)
	for range n {
		go func() {
			resp, err := c.Get(u)
			if err != nil {
				out <- outcome{err: err}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out <- outcome{status: resp.StatusCode, body: string(b)}
		}()
	}
	return out
}

// Every upstream connection the gate opens for a connection it
// terminates is admitted as a direct connection of the sandbox's is:
// one HTTP/2 connection of many streams reaches no more upstream
// connections than the session's cap, its budget or the server's cap
// allow; the rest are refused with the same reason (and a decision) as
// a direct connection over the same cap.
func TestGateSecretsUpstreamAdmitted(t *testing.T) {
	cases := []struct {
		name   string
		lim    Limits
		status int
		reason string
		open   int // upstream connections at once
	}{
		{"session cap", Limits{MaxConnections: 2}, http.StatusTooManyRequests, "the session's connection cap (2) is reached", 2},
		{"budget", Limits{Connections: 3}, http.StatusTooManyRequests, "the session's connection budget (3 connections", 3},
		{"server cap", Limits{Shared: NewShared(2)}, http.StatusServiceUnavailable, "the server connection cap (2 open egress connections", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHolder()
			defer h.release()
			f := newSecretsFixtureWith(t, []string{"example.com:TLS", "a.test:PORT"}, tc.lim, false, h.handlers)
			c := f.h2Client()
			defer c.CloseIdleConnections()
			const n = 6
			answers := parallel(c, f.url("https", "example.com")+"wait", n)
			var refused []outcome
			for range n - tc.open {
				a := <-answers
				refused = append(refused, a)
			}
			waitFor(t, func() bool { return h.arrived.Load() == int64(tc.open) })
			for _, a := range refused {
				if a.err != nil || a.status != tc.status || !strings.Contains(a.body, tc.reason) {
					t.Errorf("a request past the cap: %d %q %v, want %d naming %q", a.status, a.body, a.err, tc.status, tc.reason)
				}
			}
			if got := f.accepted.Load(); got != int64(tc.open) {
				t.Errorf("the upstream accepted %d connections, want %d", got, tc.open)
			}
			// A direct connection meets the same cap, for the same reason.
			if _, err := get(f.ns.client(nil), f.url("http", "a.test")); err == nil {
				t.Error("a direct connection went through past the cap")
			}
			h.release()
			for range tc.open {
				if a := <-answers; a.err != nil || a.status != 200 || a.body != "done" {
					t.Errorf("a request under the cap: %d %q %v", a.status, a.body, a.err)
				}
			}
			c.CloseIdleConnections()
			waitFor(t, func() bool { return f.gate.Stats().Open == 0 })
			if s := tc.lim.Shared.Stats(); s.Open != 0 {
				t.Errorf("server-wide %d connections open after the end", s.Open)
			}
			var upstream, direct int64
			for _, r := range f.gate.TakeAll() {
				switch {
				case r.Allowed:
				case strings.Contains(r.Reason, tc.reason) && strings.Contains(r.Reason, "an upstream connection"):
					upstream += max(r.Count, 1)
				case strings.Contains(r.Reason, tc.reason):
					direct += max(r.Count, 1)
				}
			}
			if upstream < 1 || direct != 1 {
				t.Errorf("records: %d upstream and %d direct connections refused for %q, want some and 1", upstream, direct, tc.reason)
			}
		})
	}
}

// Requests on one terminated connection go upstream on at most
// maxUpstream connections (the rest wait for one), and its HTTP/2 takes
// at most maxStreams at once.
func TestGateSecretsUpstreamPerConnection(t *testing.T) {
	h := newHolder()
	defer h.release()
	f := newSecretsFixtureWith(t, []string{"example.com:TLS"}, Limits{}, false, h.handlers)
	c := f.h2Client()
	defer c.CloseIdleConnections()
	answers := parallel(c, f.url("https", "example.com")+"wait", maxStreams)
	waitFor(t, func() bool { return h.arrived.Load() == maxUpstream })
	h.release()
	for range maxStreams {
		if a := <-answers; a.err != nil || a.status != 200 {
			t.Errorf("a request: %d %q %v", a.status, a.body, a.err)
		}
	}
	if got := f.accepted.Load(); got != maxUpstream {
		t.Errorf("%d requests on one connection opened %d upstream connections, want %d", maxStreams, got, maxUpstream)
	}

	// The server's SETTINGS say maxStreams.
	_, addr, _ := f.ns.lookup("example.com")
	raw, err := f.ns.dial(net.JoinHostPort(addr.String(), fmt.Sprint(f.tlsPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	tc := tls.Client(raw, &tls.Config{RootCAs: f.anchor, ServerName: "example.com", NextProtos: []string{"h2"}})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(tc, tc)
	fr.WriteSettings()
	for {
		frame, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no SETTINGS from the gate: %v", err)
		}
		if sf, ok := frame.(*http2.SettingsFrame); ok && !sf.IsAck() {
			if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != maxStreams {
				t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (%v), want %d", v, ok, maxStreams)
			}
			break
		}
	}
}

// A terminated connection lives as a carried one does: nothing moving
// for the idle timeout closes it, requests and all; the gate's end
// closes it and its upstream connections before Close returns.
func TestGateSecretsInterceptionLifetime(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		f := newSecretsFixtureWith(t, []string{"example.com:TLS"}, Limits{IdleTimeout: 200 * time.Millisecond}, false, nil)
		c := f.ns.client(&tls.Config{RootCAs: f.anchor})
		start := time.Now()
		get(c, f.url("https", "example.com")+"hang")
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("an idle terminated connection lasted %v", d)
		}
		waitFor(t, func() bool { return strings.Contains(fmt.Sprint(f.log.lines()), "idle for 200ms; TLS terminated") })
	})
	t.Run("gate closed", func(t *testing.T) {
		h := newHolder()
		defer h.release()
		shared := NewShared(8)
		f := newSecretsFixtureWith(t, []string{"example.com:TLS"}, Limits{Shared: shared}, false, h.handlers)
		c := f.h2Client()
		answers := parallel(c, f.url("https", "example.com")+"wait", 3)
		waitFor(t, func() bool { return h.arrived.Load() == 3 })
		closed := make(chan struct{})
		go func() { f.gate.Close(); close(closed) }()
		// The upstream sees its requests end, never let go, and the gate
		// closes with them.
		waitFor(t, func() bool { return h.cancelled.Load() == 3 })
		<-closed
		if s := shared.Stats(); s.Open != 0 {
			t.Errorf("%d connections open once the gate is closed", s.Open)
		}
		for range 3 {
			if a := <-answers; a.err == nil && a.status == 200 {
				t.Errorf("a request outlived the gate: %d %q", a.status, a.body)
			}
		}
		var conns []Record
		for _, r := range f.gate.TakeAll() {
			if r.Kind == "connect" {
				conns = append(conns, r)
			}
		}
		if len(conns) != 1 || !strings.HasPrefix(conns[0].Reason, "allowed: closed; TLS terminated") || !strings.Contains(conns[0].Reason, "3 requests, 3 upstream connections") {
			t.Errorf("connections recorded: %+v", conns)
		}
	})
}
