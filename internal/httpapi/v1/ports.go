package v1

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/cluster"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
	"airlock/internal/identity"
	"airlock/internal/portproxy"
	"airlock/internal/session"
)

// A session's ports, reached from outside: the routes that open, list
// and close them, the path form (/v1/sessions/{id}/ports/{port}/... on
// the API's origin) and the host form (<port>-<session>.<ports.domain>,
// dispatched by ServeHTTP before anything of the API's). A request gets in
// with an API key (of the session's tenant), the port's token, the port's
// cookie (host form, set by a one-time link), or nothing when the port is
// public. Without a key every failure is the same 401: nothing tells
// whether a session or port exists.

// portSegments are the path segments that name a port:
// /v1/sessions/{id}/ports/{port}.
const portSegments = 5

// isPortPath reports whether p is under a port of the path form
// (/v1/sessions/{id}/ports/{port}/...).
func isPortPath(p string) bool {
	segs := strings.SplitN(p, "/", portSegments+2)
	return len(segs) == portSegments+2 && segs[0] == "" && segs[1] == "v1" && segs[2] == "sessions" && segs[4] == "ports"
}

// anonymousPort reports whether r is a request to a port's path form
// without an API key, which the port itself judges (its token, or
// public) rather than the API's authentication.
func (s *Server) anonymousPort(r *http.Request) bool {
	// Both the decoded path and the escaped one (which the mux routes
	// on): an encoded slash makes no other route's path look like a
	// port's.
	return isPortPath(r.URL.Path) && isPortPath(r.URL.EscapedPath()) && r.Header.Get("Authorization") == "" &&
		!httpapi.Local(r) && s.cfg.Server.Auth != config.AuthNone
}

// openPort is POST /v1/sessions/{id}/ports/{port}: open the port (or
// make it public or private) and answer its addresses, its token and a
// one-time browser link.
func (s *Server) openPort(w http.ResponseWriter, r *http.Request) {
	var req apitype.PortRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	sess, port, ok := s.sessionPort(w, r)
	if !ok {
		return
	}
	p, err := sess.OpenPort(r.Context(), port, req.Public)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, s.portAddresses(sess.ID(), p))
}

// sessionPort is the session and port a request names, or false once
// it has answered why not.
func (s *Server) sessionPort(w http.ResponseWriter, r *http.Request) (*session.Session, int, bool) {
	port, err := session.ParsePort(r.PathValue("port"))
	if err != nil {
		fail(w, err)
		return nil, 0, false
	}
	sess, ok := s.session(w, r)
	return sess, port, ok
}

func (s *Server) getPort(w http.ResponseWriter, r *http.Request) {
	sess, port, ok := s.sessionPort(w, r)
	if !ok {
		return
	}
	p, err := sess.DescribePort(port)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, s.portAddresses(sess.ID(), p))
}

func (s *Server) listPorts(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	list := sess.Ports()
	for i := range list {
		list[i] = s.portAddresses(sess.ID(), list[i])
	}
	httpapi.WriteJSON(w, http.StatusOK, apitype.PortList{Ports: list})
}

func (s *Server) closePort(w http.ResponseWriter, r *http.Request) {
	sess, port, ok := s.sessionPort(w, r)
	if !ok {
		return
	}
	if err := sess.ClosePort(r.Context(), port); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// portAddresses fills in where p is reached: its path, and its host, URL
// and link when the server has a ports.domain and the session's id fits
// a host label.
func (s *Server) portAddresses(id string, p apitype.Port) apitype.Port {
	p.Path = "/v1/sessions/" + url.PathEscape(id) + "/ports/" + strconv.Itoa(p.Port) + "/"
	if host, ok := s.PortHost(id, p.Port); ok {
		p.Host = host
		p.URL = s.cfg.Ports.Scheme + "://" + host + "/"
		if p.LinkCode != "" {
			p.Link = p.URL + "?" + apitype.PortLinkParam + "=" + url.QueryEscape(p.LinkCode)
		}
	}
	if p.Link == "" {
		p.LinkExpiresAt = time.Time{}
	}
	return p
}

// PortHost is port's host for the session id (host form); false without
// a ports.domain, or when the id has no host label (a pod name too long
// for one DNS label).
func (s *Server) PortHost(id string, port int) (string, bool) {
	d := s.cfg.Ports.Domain
	if d == "" {
		return "", false
	}
	label, ok := cluster.HostLabel(id, cluster.MaxHostLabel-len(strconv.Itoa(port))-1)
	if !ok {
		return "", false
	}
	return portproxy.HostName(port, label, d), true
}

// portPath serves the path form: /v1/sessions/{id}/ports/{port}/...,
// every method.
func (s *Server) portPath(w http.ResponseWriter, r *http.Request) {
	port, err := session.ParsePort(r.PathValue("port"))
	if err != nil {
		fail(w, err)
		return
	}
	var p *session.Port
	if _, ok := identity.From(r.Context()); ok {
		sess, ok := s.session(w, r)
		if !ok {
			return
		}
		if p, err = sess.PortForCaller(r.Context(), port); err != nil {
			fail(w, err)
			return
		}
	} else if p, ok = s.portForToken(w, r, r.PathValue("id"), port, r.Header.Get(apitype.PortTokenHeader)); !ok {
		return
	}
	s.servePort(w, r, p, portSegments)
}

// portForToken is the port of session id that token (or nothing, for a
// public port) opens; otherwise it answers 401.
func (s *Server) portForToken(w http.ResponseWriter, r *http.Request, id string, port int, token string) (*session.Port, bool) {
	if sess, err := s.m.Get(id); err == nil {
		if p, ok := sess.PortForToken(port, token); ok {
			return p, true
		}
	}
	s.Refuse(r, apitype.AuditAuthFailure, httpapi.RefusedPortToken, identity.Identity{})
	fail(w, fmt.Errorf("%w: the port is private: send its token as %s (POST /v1/sessions/{id}/ports/{port} answers one), open its one-time link, or send an API key", errdefs.ErrUnauthenticated, apitype.PortTokenHeader))
	return nil, false
}

// ServePort proxies r to p, which the caller has authenticated r for, on
// the port's own host (the E2B API's data plane mounts it with its own
// authentication).
func (s *Server) ServePort(w http.ResponseWriter, r *http.Request, p *session.Port) {
	s.servePort(w, r, p, 0)
}

func (s *Server) servePort(w http.ResponseWriter, r *http.Request, p *session.Port, segments int) {
	httpapi.AllowRedirects(w) // the program's redirects are its own; NoRedirects is for the mux's
	p.Request()
	o := s.cfg.Ports
	portproxy.Serve(w, r, portproxy.Target{Dial: p.Dial, Port: p.Number(), Segments: segments, Fail: fail}, portproxy.Options{
		MaxRequestBytes: int64(o.MaxRequestBytes), MaxResponseBytes: int64(o.MaxResponseBytes),
		ResponseTimeout: o.ResponseTimeout.D(), IdleTimeout: o.IdleTimeout.D(), Scheme: o.Scheme,
	})
}

// hostRoute is the route the host form's requests are counted under.
const hostRoute = "{port}-{session}.{ports.domain}"

// portHost reports whether r is for a port's own host (under
// ports.domain): such a request is a port's, never the API's.
func (s *Server) portHost(r *http.Request) bool {
	if s.cfg.Ports.Domain == "" {
		return false
	}
	_, _, under, _ := portproxy.ParseHost(r.Host, s.cfg.Ports.Domain)
	return under
}

// serveHost serves the host form: every method and path of
// <port>-<session>.<ports.domain>.
func (s *Server) serveHost(w http.ResponseWriter, r *http.Request) {
	port, label, _, err := portproxy.ParseHost(r.Host, s.cfg.Ports.Domain)
	if err != nil {
		fail(w, err)
		return
	}
	// Work, as the path form is (see route.work).
	if err := s.Work(); err != nil {
		fail(w, err)
		return
	}
	id, ok := cluster.FromHostLabel(label)
	if !ok {
		fail(w, fmt.Errorf("%w: no session has the host %q", errdefs.ErrNotFound, httpapi.Truncate(r.Host)))
		return
	}
	if key := r.Header.Get(apitype.PortKeyHeader); key != "" && s.cfg.Server.Auth == config.AuthKeys {
		who, refused, err := s.Authenticate(r, key, apitype.PortKeyHeader+": <key>")
		if err != nil {
			if refused != "" {
				s.Refuse(r, apitype.AuditAuthFailure, refused, who)
			}
			fail(w, err)
			return
		}
		r = r.WithContext(identity.With(r.Context(), who))
		sess, err := s.m.Find(r.Context(), id)
		if err != nil {
			s.denied(w, r, err)
			return
		}
		p, err := sess.PortForCaller(r.Context(), port)
		if err != nil {
			fail(w, err)
			return
		}
		s.ServePort(w, r, p)
		return
	}
	if code := r.URL.Query().Get(apitype.PortLinkParam); code != "" {
		s.redeemLink(w, r, id, port, code)
		return
	}
	token := r.Header.Get(apitype.PortTokenHeader)
	cookie := false
	if token == "" {
		if c, err := r.Cookie(portproxy.CookieName(s.cfg.Ports.Scheme)); err == nil {
			token, cookie = c.Value, true
		}
	}
	p, ok := s.portForToken(w, r, id, port, token)
	if !ok {
		return
	}
	if cookie && !p.Public() {
		if err := cookieRequestGuard(r, s.cfg.Ports.Scheme); err != nil {
			s.Refuse(r, apitype.AuditAuthFailure, httpapi.RefusedPortToken, identity.Identity{})
			fail(w, err)
			return
		}
	}
	s.ServePort(w, r, p)
}

// cookieRequestGuard refuses a request that a page of another origin
// made with a private port's cookie. Every port host is under one
// ports.domain, so every tenant's ports are one site: SameSite=Lax sends
// the cookie with another tenant's page's form POST or WebSocket. A
// WebSocket must come from the port's own origin (browsers always send
// Origin with one); a method that changes state must not be same-site
// or cross-site, nor carry another Origin. Reads (GET, HEAD, OPTIONS)
// stay open: following a link to the port is how a browser gets there.
func cookieRequestGuard(r *http.Request, scheme string) error {
	origin := r.Header.Get("Origin")
	foreign := origin != "" && !httpapi.SameOrigin(origin, scheme, r.Host)
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		if foreign {
			return fmt.Errorf("%w: a WebSocket from the web page %q with the port's cookie: a port's cookie opens WebSockets only from the port's own origin (send its token as %s otherwise)", errdefs.ErrPermission, httpapi.Truncate(origin), apitype.PortTokenHeader)
		}
		return nil
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site == "same-site" || site == "cross-site" || foreign {
		from := origin
		if from == "" {
			from = site
		}
		return fmt.Errorf("%w: a %s request from %q with the port's cookie: a port's cookie sends requests that change state only from the port's own origin (send its token as %s otherwise)", errdefs.ErrPermission, r.Method, httpapi.Truncate(from), apitype.PortTokenHeader)
	}
	return nil
}

// redeemLink uses up a one-time link code: it sets the port's cookie on
// this host only and sends the browser to the same URL without the code
// (out of its history, its Referer and the program's logs).
func (s *Server) redeemLink(w http.ResponseWriter, r *http.Request, id string, port int, code string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		fail(w, fmt.Errorf("%w: a port's link is opened with GET", errdefs.ErrMethodNotAllowed))
		return
	}
	var token string
	if sess, err := s.m.Get(id); err == nil {
		token, _ = sess.RedeemPortLink(port, code)
	}
	if token == "" {
		s.Refuse(r, apitype.AuditAuthFailure, httpapi.RefusedPortToken, identity.Identity{})
		fail(w, fmt.Errorf("%w: the link was used already or has expired (ports.link_ttl): POST /v1/sessions/{id}/ports/{port} gives a new one", errdefs.ErrUnauthenticated))
		return
	}
	https := s.cfg.Ports.Scheme == "https"
	http.SetCookie(w, &http.Cookie{Name: portproxy.CookieName(s.cfg.Ports.Scheme), Value: token, Path: "/", HttpOnly: true,
		Secure: https, SameSite: http.SameSiteLaxMode})
	q := r.URL.Query()
	q.Del(apitype.PortLinkParam)
	loc := r.URL.EscapedPath()
	if !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, "/\\") {
		loc = "/" // never another host (a protocol-relative //host)
	}
	if len(q) > 0 {
		loc += "?" + q.Encode()
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, loc, http.StatusSeeOther)
}
