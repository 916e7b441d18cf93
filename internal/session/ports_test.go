package session

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/broker"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
)

// portEvents records what observers hear of ports.
type portEvents struct {
	nopObserver
	mu  sync.Mutex
	all []PortEvent
}

func (p *portEvents) PortUsed(e PortEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.all = append(p.all, e)
}

func (p *portEvents) ops() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, e := range p.all {
		out = append(out, e.Op)
	}
	return strings.Join(out, ",")
}

type nopObserver struct{}

func (nopObserver) SessionCreated(SessionEvent)      {}
func (nopObserver) SessionEnded(SessionEvent)        {}
func (nopObserver) ExecutionStarted(ExecutionEvent)  {}
func (nopObserver) ExecutionFinished(ExecutionEvent) {}
func (nopObserver) FileTransferred(FileEvent)        {}
func (nopObserver) NetworkChanged(NetworkEvent)      {}
func (nopObserver) PortUsed(PortEvent)               {}
func (nopObserver) ToolCalled(ToolCallEvent)         {}

// A port opens with a token that only it accepts; opening it again keeps
// the token and gives a new one-time link code; a link code works once;
// closing the port (or ending the session) makes its token and links
// worthless; every step is heard.
func TestPortTokens(t *testing.T) {
	cfg := testConfig()
	cfg.Ports.AllowPublic = true
	m, _, _ := newTestManager(t, &cfg)
	ev := &portEvents{}
	m.Observe(ev)
	s := create(t, m, "python")
	other := create(t, m, "python")
	ctx := context.Background()

	p, err := s.OpenPort(ctx, 8080, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.Token, portTokenPrefix) || len(p.Token) < 60 || p.LinkCode == "" || p.LinkCode == p.Token || p.Public {
		t.Fatalf("%+v", p)
	}
	if _, ok := s.PortForToken(8080, p.Token); !ok {
		t.Error("the port's own token is refused")
	}
	for _, c := range []struct {
		s     *Session
		port  int
		token string
	}{{s, 8080, ""}, {s, 8080, p.Token[:len(p.Token)-1]}, {s, 8081, p.Token}, {other, 8080, p.Token}, {s, 8080, p.LinkCode}} {
		if _, ok := c.s.PortForToken(c.port, c.token); ok {
			t.Errorf("port %d of %s opened with %q", c.port, c.s.ID(), c.token)
		}
	}
	again, err := s.OpenPort(ctx, 8080, false)
	if err != nil || again.Token != p.Token || again.LinkCode == p.LinkCode {
		t.Fatalf("reopened: %+v %v", again, err)
	}
	if tok, ok := s.RedeemPortLink(8080, p.LinkCode); !ok || tok != p.Token {
		t.Errorf("link: %q %v", tok, ok)
	}
	if _, ok := s.RedeemPortLink(8080, p.LinkCode); ok {
		t.Error("a link code worked twice")
	}
	if _, ok := s.RedeemPortLink(8081, again.LinkCode); ok {
		t.Error("a link code worked for another port")
	}
	// Public: no token needed.
	if _, err := s.OpenPort(ctx, 8080, true); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.PortForToken(8080, ""); !ok {
		t.Error("a public port wants a token")
	}
	if err := s.ClosePort(ctx, 8080); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.PortForToken(8080, p.Token); ok {
		t.Error("a closed port's token works")
	}
	if _, ok := s.RedeemPortLink(8080, again.LinkCode); ok {
		t.Error("a closed port's link works")
	}
	if err := s.ClosePort(ctx, 8080); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("closing twice: %v", err)
	}
	if got := ev.ops(); got != "open,change,change,close" {
		t.Errorf("events %s", got)
	}
	p2, _ := s.OpenPort(ctx, 9000, false)
	m.Delete(s.ID())
	if _, ok := s.PortForToken(9000, p2.Token); ok {
		t.Error("an ended session's port is open")
	}
	if _, err := s.OpenPort(ctx, 9001, false); !errors.Is(err, errdefs.ErrGone) {
		t.Errorf("opening a port of an ended session: %v", err)
	}
	if got := ev.ops(); got != "open,change,change,close,open,close" {
		t.Errorf("events %s", got)
	}
}

// The server's caps: no public port unless allowed, ports 1 to 65535,
// ports.max_per_session, nothing when ports are off.
func TestPortLimits(t *testing.T) {
	cfg := testConfig()
	cfg.Ports.MaxPerSession = 2
	cfg.Ports.LinkTTL = config.Duration(time.Nanosecond)
	m, _, _ := newTestManager(t, &cfg)
	s := create(t, m, "python")
	ctx := context.Background()
	if _, err := s.OpenPort(ctx, 80, true); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("public without ports.allow_public: %v", err)
	}
	for _, port := range []int{0, -1, 65536} {
		if _, err := s.OpenPort(ctx, port, false); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("port %d: %v", port, err)
		}
	}
	p, err := s.OpenPort(ctx, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.RedeemPortLink(1, p.LinkCode); ok {
		t.Error("an expired link works")
	}
	if _, err := s.PortForCaller(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenPort(ctx, 3, false); !errors.Is(err, errdefs.ErrLimit) {
		t.Errorf("a third port: %v", err)
	}
	if got := s.Ports(); len(got) != 2 || got[0].Port != 1 || got[1].Port != 2 || got[0].Token != "" {
		t.Errorf("ports %+v", got)
	}
	for _, in := range []string{"0", "080", "+80", "65536", "", "8o", "123456"} {
		if _, err := ParsePort(in); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParsePort(%q): %v", in, err)
		}
	}
	cfg.Ports.Enabled = false
	m2, _, _ := newTestManager(t, &cfg)
	s2 := create(t, m2, "python")
	if _, err := s2.OpenPort(ctx, 80, false); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("ports off: %v", err)
	}
}

// A sandbox with no network namespace of its own reachable from outside
// (gVisor without a network) says how to get one.
func TestPortWithoutNetwork(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	s := create(t, m, "python")
	p, err := s.PortForCaller(context.Background(), 8080)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Dial(context.Background())
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), `"network"`) {
		t.Errorf("dial: %v", err)
	}
	if got := s.Ports()[0]; got.OpenConnections != 0 {
		t.Errorf("%+v", got)
	}
}

// Airlock's own ports inside a sandbox (the tool endpoint, the egress
// proxy, DNS) are no program's: no way in reaches them, neither opening
// (private or public), nor a caller with a key, nor a token, nor a dial.
func TestPortAirlockPorts(t *testing.T) {
	cfg := testConfig()
	cfg.Ports.AllowPublic = true
	m, _, _ := newTestManager(t, &cfg)
	s := create(t, m, "python")
	ctx := context.Background()
	for _, port := range []int{broker.Port, egress.ProxyPort, 53} {
		for _, public := range []bool{false, true} {
			if _, err := s.OpenPort(ctx, port, public); !errors.Is(err, errdefs.ErrPermission) || !strings.Contains(err.Error(), "airlock's") {
				t.Errorf("open %d (public %v): %v", port, public, err)
			}
		}
		if _, err := s.PortForCaller(ctx, port); !errors.Is(err, errdefs.ErrPermission) {
			t.Errorf("with a key, port %d: %v", port, err)
		}
		if _, ok := s.PortForToken(port, ""); ok {
			t.Errorf("public port %d reached", port)
		}
		if _, err := s.dialPort(ctx, port); !errors.Is(err, errdefs.ErrPermission) {
			t.Errorf("dial %d: %v", port, err)
		}
	}
}
