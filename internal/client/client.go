// Package client owns airlock's Go client: typed calls for every operation
// of the HTTP API (sessions, executions with optional streaming, files,
// one-shot and program runs, health) over TCP or the server's unix socket,
// with errors that errors.Is-match errdefs' sentinels. The command line,
// the benchmark and the end-to-end tests use it.
//
// It must never import server-side packages (only apitype, errdefs and
// config), and never hide a server's error: every failure comes back as
// an *Error with the status, code, message and request id the server sent,
// or as the transport's own error.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// Client talks to one airlock server.
type Client struct {
	base  string // "http://host:port", no trailing slash
	http  *http.Client
	token string
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer token" (server.token).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient replaces the HTTP client (transport, timeouts).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// New returns a client of the server at baseURL ("http://127.0.0.1:8080").
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), http: &http.Client{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Unix returns a client of the server listening on the unix socket at
// path (server.socket; no token needed). A local server answers at once
// or not at all: connecting gives up after a second.
func Unix(path string, opts ...Option) *Client {
	d := net.Dialer{Timeout: time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, "unix", path)
			if err != nil {
				return nil, &unreachable{err}
			}
			return conn, nil
		},
		DisableCompression: true,
	}
	return New("http://airlock", append([]Option{WithHTTPClient(&http.Client{Transport: tr})}, opts...)...)
}

// ErrUnreachable matches a failure to connect: nothing was sent.
var ErrUnreachable = errors.New("the airlock server cannot be reached")

type unreachable struct{ err error }

func (u *unreachable) Error() string { return ErrUnreachable.Error() + ": " + u.err.Error() }
func (u *unreachable) Unwrap() []error {
	return []error{ErrUnreachable, u.err}
}

// Error is an error response of the server.
type Error struct {
	Status    int
	Code      string
	Message   string
	EndCode   apitype.EndCode // why the session ended (code session_ended)
	RequestID string
}

func (e *Error) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("airlock server: %d %s", e.Status, http.StatusText(e.Status))
}

// Unwrap gives the errdefs sentinel of the error's code, so that
// errors.Is(err, errdefs.ErrGone) works on this side too.
func (e *Error) Unwrap() error { return errdefs.KindFor(e.Code).Err }

// StatusOf is the HTTP status of a server's error (0 if err is not one).
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// CloseIdleConnections closes idle connections to the server.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// request builds a request; body is JSON-encoded unless it is nil or an
// io.Reader.
func (c *Client) request(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case io.Reader:
		r = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return nil, err
	}
	if _, ok := body.(io.Reader); !ok && body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// do sends req and returns the response if its status is a success; an
// error response becomes an *Error.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusNotModified {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

// readError turns an error response into an *Error.
func readError(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get(apitype.RequestIDHeader)}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var body apitype.ErrorBody
	if json.Unmarshal(data, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message, e.EndCode = body.Error.Code, body.Error.Message, body.Error.EndCode
		if body.Error.RequestID != "" {
			e.RequestID = body.Error.RequestID
		}
	} else {
		// Not the API's error body (a 416's text, a proxy's page).
		e.Message = strings.TrimSpace(string(data))
		if e.Message == "" {
			e.Message = fmt.Sprintf("airlock server: %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
		}
	}
	return e
}

// call sends a JSON request and decodes a JSON answer into out (if not
// nil).
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	req, err := c.request(ctx, method, path, in)
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("airlock server: bad response to %s %s: %w", method, path, err)
	}
	return nil
}

// Health is GET /healthz.
func (c *Client) Health(ctx context.Context) (*apitype.Health, error) {
	var h apitype.Health
	if err := c.call(ctx, "GET", "/healthz", nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// Ready is GET /readyz: whether the server takes a new session now, and
// why not. A server that is not ready answers 503 with the same body,
// which is not an error here.
func (c *Client) Ready(ctx context.Context) (*apitype.Readiness, error) {
	req, err := c.request(ctx, "GET", "/readyz", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		return nil, readError(resp)
	}
	var r apitype.Readiness
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(data, &r); err != nil {
		// A 503 that is not airlock's (a proxy's page).
		resp.Body = io.NopCloser(bytes.NewReader(data))
		return nil, readError(resp)
	}
	return &r, nil
}

// WaitWarm waits until the server answers and its pools are full, or ctx
// ends.
func (c *Client) WaitWarm(ctx context.Context) error {
	for {
		h, err := c.Health(ctx)
		if err == nil && h.Warm() {
			return nil
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			if err == nil {
				err = errors.New("pools not full")
			}
			return fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
	}
}

// CreateSession starts a session.
func (c *Client) CreateSession(ctx context.Context, req apitype.CreateSessionRequest) (*apitype.Session, error) {
	var s apitype.Session
	if err := c.call(ctx, "POST", "/v1/sessions", req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Session describes a session.
func (c *Client) Session(ctx context.Context, id string) (*apitype.Session, error) {
	var s apitype.Session
	if err := c.call(ctx, "GET", sessionPath(id), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Sessions lists the live and paused sessions.
func (c *Client) Sessions(ctx context.Context) ([]apitype.Session, error) {
	return c.SessionsWhere(ctx, apitype.SessionFilter{})
}

// SessionsWhere lists the sessions f selects (their states, their
// metadata).
func (c *Client) SessionsWhere(ctx context.Context, f apitype.SessionFilter) ([]apitype.Session, error) {
	q := url.Values{}
	if len(f.States) > 0 {
		q.Set("state", strings.Join(f.States, ","))
	}
	for k, v := range f.Metadata {
		q.Set("metadata."+k, v)
	}
	p := "/v1/sessions"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var l apitype.SessionList
	if err := c.call(ctx, "GET", p, nil, &l); err != nil {
		return nil, err
	}
	return l.Sessions, nil
}

// Network returns a session's egress policy and counters.
func (c *Client) Network(ctx context.Context, id string) (*apitype.NetworkState, error) {
	var st apitype.NetworkState
	if err := c.call(ctx, "GET", sessionPath(id)+"/network", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// OpenPort opens port of session id to the outside (or makes it public
// or private): its addresses, token and one-time link.
func (c *Client) OpenPort(ctx context.Context, id string, port int, public bool) (*apitype.Port, error) {
	var p apitype.Port
	if err := c.call(ctx, "POST", sessionPath(id)+"/ports/"+strconv.Itoa(port), apitype.PortRequest{Public: public}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Ports lists the open ports of session id.
func (c *Client) Ports(ctx context.Context, id string) ([]apitype.Port, error) {
	var l apitype.PortList
	if err := c.call(ctx, "GET", sessionPath(id)+"/ports", nil, &l); err != nil {
		return nil, err
	}
	return l.Ports, nil
}

// ClosePort closes port of session id: its token stops working.
func (c *Client) ClosePort(ctx context.Context, id string, port int) error {
	return c.call(ctx, "DELETE", sessionPath(id)+"/ports/"+strconv.Itoa(port), nil, nil)
}

// SetNetwork replaces a session's egress allowlist; new lookups and
// connections follow it.
func (c *Client) SetNetwork(ctx context.Context, id string, allow []string) (*apitype.NetworkState, error) {
	var st apitype.NetworkState
	if allow == nil {
		allow = []string{}
	}
	if err := c.call(ctx, "PUT", sessionPath(id)+"/network", apitype.NetworkPolicy{Allow: allow}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// InstallPackages installs packages into a session (pip, Python sessions).
func (c *Client) InstallPackages(ctx context.Context, id string, req apitype.PackagesRequest) (*apitype.PackagesResult, error) {
	var res apitype.PackagesResult
	if err := c.call(ctx, "POST", sessionPath(id)+"/packages", req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// DeleteSession ends a session.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", sessionPath(id), nil, nil)
}

// DeletePausedSession deletes a session only if it is paused: one that
// is live (resumed meanwhile) or being resumed is a 409 conflict and
// runs on.
func (c *Client) DeletePausedSession(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", sessionPath(id)+"?state=paused", nil, nil)
}

// PauseSession pauses a session: its files and settings are kept on the
// server's disk (and its memory where it says Restores "memory"), its
// sandbox freed (ErrConflict while it executes code).
func (c *Client) PauseSession(ctx context.Context, id string) (*apitype.Session, error) {
	return c.PauseSessionWith(ctx, id, apitype.PauseRequest{})
}

// PauseSessionWith pauses a session keeping what req asks: Restores
// "files" keeps its files only, even where its memory could be kept;
// "memory" is refused (ErrInvalidArgument, saying why) where it cannot.
func (c *Client) PauseSessionWith(ctx context.Context, id string, req apitype.PauseRequest) (*apitype.Session, error) {
	var s apitype.Session
	if err := c.call(ctx, "POST", sessionPath(id)+"/pause", req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ResumeSession makes a paused session live again in a fresh sandbox
// (Restored says what came back: "files", or "memory" too under gVisor
// with gvisor.checkpoint; RestoredReason why less than the pause kept).
func (c *Client) ResumeSession(ctx context.Context, id string) (*apitype.Session, error) {
	return c.ResumeSessionWith(ctx, id, apitype.ResumeRequest{})
}

// ResumeSessionWith resumes a paused session restoring what req asks:
// Restores "files" brings back its files only, its interpreters started
// afresh, even where its pause kept its memory.
func (c *Client) ResumeSessionWith(ctx context.Context, id string, req apitype.ResumeRequest) (*apitype.Session, error) {
	var s apitype.Session
	if err := c.call(ctx, "POST", sessionPath(id)+"/resume", req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ForkSession creates a new session from a live or paused one's files
// and settings (Restored "files").
func (c *Client) ForkSession(ctx context.Context, id string) (*apitype.Session, error) {
	var s apitype.Session
	if err := c.call(ctx, "POST", sessionPath(id)+"/fork", nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// SetTimeout sets a session's lifetime again, from now.
func (c *Client) SetTimeout(ctx context.Context, id string, d time.Duration) (*apitype.Session, error) {
	var s apitype.Session
	if err := c.call(ctx, "PUT", sessionPath(id)+"/timeout", apitype.TimeoutRequest{Timeout: apitype.Duration(d)}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Interrupt interrupts a session's running executions; false if none ran.
func (c *Client) Interrupt(ctx context.Context, id string) (bool, error) {
	var r apitype.InterruptResult
	err := c.call(ctx, "POST", sessionPath(id)+"/interrupt", nil, &r)
	return r.Interrupted, err
}

// InterruptContext interrupts the execution running in one of a session's
// code contexts; false if none ran.
func (c *Client) InterruptContext(ctx context.Context, id, contextID string) (bool, error) {
	var r apitype.InterruptResult
	err := c.call(ctx, "POST", sessionPath(id)+"/interrupt?context="+url.QueryEscape(contextID), nil, &r)
	return r.Interrupted, err
}

// CreateContext starts a code context in a session's sandbox.
func (c *Client) CreateContext(ctx context.Context, id string, req apitype.CreateContextRequest) (*apitype.CodeContext, error) {
	var res apitype.CodeContext
	if err := c.call(ctx, "POST", sessionPath(id)+"/contexts", req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Contexts lists a session's code contexts, the default first.
func (c *Client) Contexts(ctx context.Context, id string) ([]apitype.CodeContext, error) {
	var res apitype.ContextList
	if err := c.call(ctx, "GET", sessionPath(id)+"/contexts", nil, &res); err != nil {
		return nil, err
	}
	return res.Contexts, nil
}

// DeleteContext ends one of a session's code contexts.
func (c *Client) DeleteContext(ctx context.Context, id, contextID string) error {
	return c.call(ctx, "DELETE", sessionPath(id)+"/contexts/"+url.PathEscape(contextID), nil, nil)
}

// Context describes one of a session's code contexts.
func (c *Client) Context(ctx context.Context, id, contextID string) (*apitype.CodeContext, error) {
	var res apitype.CodeContext
	if err := c.call(ctx, "GET", sessionPath(id)+"/contexts/"+url.PathEscape(contextID), nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// RestartContext starts a code context's interpreter anew (empty state,
// the same id, language, directory and environment).
func (c *Client) RestartContext(ctx context.Context, id, contextID string) (*apitype.CodeContext, error) {
	var res apitype.CodeContext
	if err := c.call(ctx, "POST", sessionPath(id)+"/contexts/"+url.PathEscape(contextID)+"/restart", nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Execute runs code in a session. With onEvent, the execution streams:
// onEvent gets every event as it happens, the end event last.
func (c *Client) Execute(ctx context.Context, id string, req apitype.ExecuteRequest, onEvent func(apitype.Event)) (*apitype.Result, error) {
	if onEvent == nil {
		var res apitype.Result
		if err := c.call(ctx, "POST", sessionPath(id)+"/execute", req, &res); err != nil {
			return nil, err
		}
		return &res, nil
	}
	end, err := c.stream(ctx, "POST", sessionPath(id)+"/execute", req, onEvent)
	if err != nil {
		return nil, err
	}
	return end.Result, nil
}

// RunCommand runs a shell command in a session's sandbox (POST
// .../commands); onEvent as for Execute. A background command returns at
// once, running.
func (c *Client) RunCommand(ctx context.Context, id string, req apitype.CommandRequest, onEvent func(apitype.Event)) (*apitype.CommandResult, error) {
	if onEvent == nil || req.Background {
		var res apitype.CommandResult
		if err := c.call(ctx, "POST", sessionPath(id)+"/commands", req, &res); err != nil {
			return nil, err
		}
		return &res, nil
	}
	end, err := c.stream(ctx, "POST", sessionPath(id)+"/commands", req, onEvent)
	if err != nil {
		return nil, err
	}
	if end.Command == nil {
		return nil, errors.New("airlock server: a command's end event without its result")
	}
	return end.Command, nil
}

// Command describes one of a session's commands, waiting up to wait (if
// not zero) for it to end.
func (c *Client) Command(ctx context.Context, id, cid string, wait time.Duration) (*apitype.CommandResult, error) {
	p := sessionPath(id) + "/commands/" + url.PathEscape(cid)
	if wait > 0 {
		p += "?wait=" + url.QueryEscape(wait.String())
	}
	var res apitype.CommandResult
	if err := c.call(ctx, "GET", p, nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Commands lists a session's commands.
func (c *Client) Commands(ctx context.Context, id string) ([]apitype.CommandResult, error) {
	var res apitype.CommandList
	if err := c.call(ctx, "GET", sessionPath(id)+"/commands", nil, &res); err != nil {
		return nil, err
	}
	return res.Commands, nil
}

// SignalCommand signals a running command's process group.
func (c *Client) SignalCommand(ctx context.Context, id, cid, signal string) error {
	return c.call(ctx, "POST", sessionPath(id)+"/commands/"+url.PathEscape(cid)+"/signal", apitype.SignalRequest{Signal: signal}, nil)
}

// CommandStdin writes to a running command's standard input.
func (c *Client) CommandStdin(ctx context.Context, id, cid, data string, close bool) error {
	return c.call(ctx, "POST", sessionPath(id)+"/commands/"+url.PathEscape(cid)+"/stdin", apitype.StdinRequest{Data: data, Close: close}, nil)
}

// CommandStdinBytes writes bytes (a terminal's keys) to a running
// command's standard input.
func (c *Client) CommandStdinBytes(ctx context.Context, id, cid string, data []byte) error {
	return c.call(ctx, "POST", sessionPath(id)+"/commands/"+url.PathEscape(cid)+"/stdin", apitype.StdinRequest{DataBase64: base64.StdEncoding.EncodeToString(data)}, nil)
}

// ResizeCommand sets the size of a running command's terminal.
func (c *Client) ResizeCommand(ctx context.Context, id, cid string, cols, rows int) error {
	return c.call(ctx, "POST", sessionPath(id)+"/commands/"+url.PathEscape(cid)+"/resize", apitype.PTYSize{Cols: cols, Rows: rows}, nil)
}

// AttachCommand follows a command by id (GET .../commands/{cid}/events):
// with replay, what it printed so far first; onEvent gets every event,
// and how the command ended is returned. Attaching again after the
// client left is how a client resumes.
func (c *Client) AttachCommand(ctx context.Context, id, cid string, replay bool, onEvent func(apitype.Event)) (*apitype.CommandResult, error) {
	if onEvent == nil {
		onEvent = func(apitype.Event) {}
	}
	end, err := c.stream(ctx, "GET", sessionPath(id)+"/commands/"+url.PathEscape(cid)+"/events?replay="+strconv.FormatBool(replay), nil, onEvent)
	if err != nil {
		return nil, err
	}
	if end.Command == nil {
		return nil, errors.New("airlock server: an end event without a command")
	}
	return end.Command, nil
}

// RunOnce runs code once in a fresh sandbox (POST /v1/execute); onEvent as
// for Execute.
func (c *Client) RunOnce(ctx context.Context, req apitype.OneShotRequest, onEvent func(apitype.Event)) (*apitype.OneShotResult, error) {
	return c.oneShot(ctx, "/v1/execute", req, onEvent)
}

// RunProgram runs a program once in a fresh sandbox (POST /v1/run);
// onEvent as for Execute.
func (c *Client) RunProgram(ctx context.Context, req apitype.ProgramRequest, onEvent func(apitype.Event)) (*apitype.OneShotResult, error) {
	return c.oneShot(ctx, "/v1/run", req, onEvent)
}

func (c *Client) oneShot(ctx context.Context, path string, req any, onEvent func(apitype.Event)) (*apitype.OneShotResult, error) {
	if onEvent == nil {
		var res apitype.OneShotResult
		if err := c.call(ctx, "POST", path, req, &res); err != nil {
			return nil, err
		}
		if res.Result == nil {
			return nil, fmt.Errorf("airlock server: a result without its fields")
		}
		return &res, nil
	}
	end, err := c.stream(ctx, "POST", path, req, onEvent)
	if err != nil {
		return nil, err
	}
	return &apitype.OneShotResult{Result: end.Result, Files: end.Files, Limits: end.Limits}, nil
}

// stream sends req asking for NDJSON and hands every event to onEvent
// until the end event, which it returns; a failed event is the request's
// error.
func (c *Client) stream(ctx context.Context, method, path string, in any, onEvent func(apitype.Event)) (*apitype.Event, error) {
	req, err := c.request(ctx, method, path, in)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	for sc.Scan() {
		var ev apitype.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("airlock server: a bad event: %w", err)
		}
		onEvent(ev)
		switch ev.Type {
		case apitype.EventEnd:
			if ev.Result == nil && ev.Command == nil {
				return nil, errors.New("airlock server: an end event without a result")
			}
			return &ev, nil
		case apitype.EventFailed:
			e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get(apitype.RequestIDHeader)}
			if ev.Error != nil {
				e.Code, e.Message = ev.Error.Name, ev.Error.Value
			}
			return nil, e
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("airlock server: the stream ended without a result")
}

// Upload writes r (size bytes, or -1 if unknown) to path in a session's
// /workspace.
func (c *Client) Upload(ctx context.Context, id, path string, r io.Reader, size int64) (*apitype.UploadResult, error) {
	req, err := c.request(ctx, "PUT", filePath(id, path), r)
	if err != nil {
		return nil, err
	}
	if size >= 0 {
		req.ContentLength = size
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var up apitype.UploadResult
	if err := json.NewDecoder(resp.Body).Decode(&up); err != nil {
		return nil, fmt.Errorf("airlock server: bad upload response: %w", err)
	}
	return &up, nil
}

// Download opens a file of a session's /workspace; the caller closes it.
func (c *Client) Download(ctx context.Context, id, path string) (io.ReadCloser, error) {
	req, err := c.request(ctx, "GET", filePath(id, path), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ListFiles lists dir ("" for /workspace itself) of a session.
func (c *Client) ListFiles(ctx context.Context, id, dir string, recursive bool) (*apitype.FileList, error) {
	q := url.Values{}
	if dir != "" {
		q.Set("path", dir)
	}
	if recursive {
		q.Set("recursive", "true")
	}
	p := sessionPath(id) + "/files"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var l apitype.FileList
	if err := c.call(ctx, "GET", p, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// DeleteFile removes path of a session (a directory with recursive).
func (c *Client) DeleteFile(ctx context.Context, id, path string, recursive bool) error {
	p := filePath(id, path)
	if recursive {
		p += "?recursive=" + strconv.FormatBool(recursive)
	}
	return c.call(ctx, "DELETE", p, nil, nil)
}

func sessionPath(id string) string { return "/v1/sessions/" + url.PathEscape(id) }

// filePath escapes each segment of a workspace path.
func filePath(id, path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return sessionPath(id) + "/files/" + strings.Join(parts, "/")
}

// Audit reads a page of the audit log; query holds GET /v1/audit's
// parameters (since, until, session, tenant, kind, limit, cursor).
func (c *Client) Audit(ctx context.Context, query url.Values) (*apitype.AuditList, error) {
	var l apitype.AuditList
	p := "/v1/audit"
	if len(query) > 0 {
		p += "?" + query.Encode()
	}
	if err := c.call(ctx, "GET", p, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// History reads a session's history: the entries after seq after (0:
// all), oldest first.
func (c *Client) History(ctx context.Context, id string, after int64) (*apitype.History, error) {
	var h apitype.History
	p := sessionPath(id) + "/history"
	if after > 0 {
		p += "?after=" + strconv.FormatInt(after, 10)
	}
	if err := c.call(ctx, "GET", p, nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// Notebook reads a session's history as a Jupyter notebook (.ipynb).
func (c *Client) Notebook(ctx context.Context, id string) ([]byte, error) {
	req, err := c.request(ctx, "GET", sessionPath(id)+"/notebook", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// Templates lists the templates the caller may name (GET /v1/templates).
func (c *Client) Templates(ctx context.Context) (*apitype.TemplateList, error) {
	var l apitype.TemplateList
	if err := c.call(ctx, "GET", "/v1/templates", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Template describes one template (GET /v1/templates/{name}).
func (c *Client) Template(ctx context.Context, name string) (*apitype.Template, error) {
	var t apitype.Template
	if err := c.call(ctx, "GET", "/v1/templates/"+url.PathEscape(name), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Whoami says who the client's credentials are.
func (c *Client) Whoami(ctx context.Context) (*apitype.Whoami, error) {
	var w apitype.Whoami
	if err := c.call(ctx, "GET", "/v1/whoami", nil, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// Tools lists the tools the caller's sessions may opt in to.
func (c *Client) Tools(ctx context.Context) (*apitype.ToolList, error) {
	var l apitype.ToolList
	if err := c.call(ctx, "GET", "/v1/tools", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Secrets lists the secrets the caller's sessions may opt in to (never
// their values).
func (c *Client) Secrets(ctx context.Context) (*apitype.SecretList, error) {
	var l apitype.SecretList
	if err := c.call(ctx, "GET", "/v1/secrets", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// SessionTools lists the tools a session's code may call.
func (c *Client) SessionTools(ctx context.Context, id string) (*apitype.ToolList, error) {
	var l apitype.ToolList
	if err := c.call(ctx, "GET", sessionPath(id)+"/tools", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}
