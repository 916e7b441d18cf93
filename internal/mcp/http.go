package mcp

import (
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/identity"
)

// sessionHeader names an MCP session on the streamable HTTP transport.
const sessionHeader = "Mcp-Session-Id"

// HTTPOptions configure the streamable HTTP transport.
type HTTPOptions struct {
	// Idle ends an MCP session that has no request in flight and no
	// stream open (its client went away without DELETE) after this long.
	Idle time.Duration
	// MaxQuiet ends an MCP session after this long without a request
	// from its client, even with a stream open.
	MaxQuiet time.Duration
}

// httpSessions is /mcp: the SDK's stateful handler behind two checks of
// its own. An MCP session id acts only for the caller that opened it
// (the same key, tenant and rights): to anyone else it is the same 404 as
// an id that never existed, so that an id seen in a log or a proxy gives
// nothing. And a session whose client is gone ends after a short idle
// time, with its default sessions, instead of holding sandboxes until
// MaxQuiet.
type httpSessions struct {
	s    *Server
	sdk  http.Handler
	idle time.Duration

	mu   sync.Mutex
	byID map[string]*httpSession
}

// httpSession is one MCP session of the HTTP transport.
type httpSession struct {
	owner identity.Identity
	ss    *mcp.ServerSession
	open  int         // requests in flight, streams included
	timer *time.Timer // ends the session once open is 0 for idle
}

// HTTPHandler serves MCP's streamable HTTP transport (at /mcp, whose
// ?content= picks the blocks results carry besides text), behind the
// API's authentication (the caller's identity is in the request's
// context). The SDK's DNS rebinding guard stays on: a request that
// reached a loopback address with another Host is refused.
func (s *Server) HTTPHandler(o HTTPOptions) http.Handler {
	return withContent(&httpSessions{
		s: s, idle: o.Idle, byID: map[string]*httpSession{},
		sdk: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.srv }, &mcp.StreamableHTTPOptions{
			SessionTimeout: o.MaxQuiet,
			Logger:         s.o.Log,
		}),
	})
}

func (h *httpSessions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	who, _ := identity.From(r.Context())
	id := r.Header.Get(sessionHeader)
	if id == "" {
		// A new session (or the SDK's 400): it belongs to who opened it
		// from the moment its id is sent.
		rec := &opening{ResponseWriter: w, h: h, who: who}
		h.sdk.ServeHTTP(rec, r)
		if rec.id != "" {
			h.release(rec.id)
		}
		return
	}
	if !h.acquire(id, who) {
		// Exactly what an unknown id gets (the SDK's own answer).
		http.Error(w, "session not found", http.StatusNotFound)
		return
	}
	defer h.release(id)
	h.sdk.ServeHTTP(w, r)
}

// opened records a session the SDK just created, as one request in
// flight (the one that opened it), and forgets it once it closes.
func (h *httpSessions) opened(id string, who identity.Identity) {
	var ss *mcp.ServerSession
	for s := range h.s.srv.Sessions() {
		if s.ID() == id {
			ss = s
			break
		}
	}
	if ss == nil {
		return // closed already: its id stays unknown
	}
	h.mu.Lock()
	h.byID[id] = &httpSession{owner: who, ss: ss, open: 1}
	h.mu.Unlock()
	go func() {
		ss.Wait()
		h.mu.Lock()
		if hs := h.byID[id]; hs != nil && hs.timer != nil {
			hs.timer.Stop()
		}
		delete(h.byID, id)
		h.mu.Unlock()
	}()
}

// acquire counts a request of who on session id, stopping its idle
// clock; false if the session is unknown or not who's.
func (h *httpSessions) acquire(id string, who identity.Identity) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	hs := h.byID[id]
	if hs == nil || hs.owner != who {
		return false
	}
	hs.open++
	if hs.timer != nil {
		hs.timer.Stop()
		hs.timer = nil
	}
	return true
}

// release ends a request on session id; the last one starts its idle
// clock.
func (h *httpSessions) release(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hs := h.byID[id]
	if hs == nil {
		return
	}
	if hs.open--; hs.open > 0 || h.idle <= 0 {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(h.idle, func() {
		h.mu.Lock()
		stale := hs.timer != t // a request came meanwhile
		h.mu.Unlock()
		if !stale {
			h.s.o.Log.Debug("mcp: an HTTP session with no request or stream open ends", "idle", h.idle)
			hs.ss.Close()
		}
	})
	hs.timer = t
}

// opening is the response to a request without a session id: when the
// SDK sends a new session's id, the session is recorded as the caller's
// before the client can read the id.
type opening struct {
	http.ResponseWriter
	h     *httpSessions
	who   identity.Identity
	id    string
	wrote bool
}

func (o *opening) WriteHeader(code int) {
	if !o.wrote {
		o.wrote = true
		if id := o.Header().Get(sessionHeader); id != "" {
			o.id = id
			o.h.opened(id, o.who)
		}
	}
	o.ResponseWriter.WriteHeader(code)
}

func (o *opening) Write(b []byte) (int, error) {
	if !o.wrote {
		o.WriteHeader(http.StatusOK)
	}
	return o.ResponseWriter.Write(b)
}

func (o *opening) Flush() {
	if !o.wrote {
		o.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(o.ResponseWriter).Flush()
}

func (o *opening) Unwrap() http.ResponseWriter { return o.ResponseWriter }
