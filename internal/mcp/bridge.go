package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
)

// BridgeOptions configure Bridge.
type BridgeOptions struct {
	// URL is the remote server's MCP endpoint (https://host:8080/mcp).
	URL string
	// Key is an API key of the remote server ("" sends none).
	Key string
	// In and Out are the stdio client's: one JSON-RPC message per line.
	In  io.Reader
	Out io.Writer
	// HTTP is the client to reach the server with (nil: a default one).
	HTTP *http.Client
	Log  *slog.Logger
}

// maxMessage bounds one message from either side (the server takes at
// most 4 MiB; results with images are larger).
const maxMessage = 64 << 20

// Bridge relays MCP between a stdio client and a remote airlock's
// streamable HTTP endpoint, so that a client that can only start a
// command (Claude Desktop, Cursor) uses a server elsewhere, with an API
// key, without root or a jail on this machine. Each client message is
// one POST (concurrently: a cancellation must overtake the call it
// cancels); responses and the server's own messages (the GET stream) go
// to Out. A session the server no longer knows (it timed out) is opened
// again with the client's own initialize. Bridge returns when In ends or
// ctx ends, after ending the remote session (DELETE), which ends every
// sandbox session it opened at once.
func Bridge(ctx context.Context, o BridgeOptions) error {
	if o.HTTP == nil {
		o.HTTP = &http.Client{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	b := &bridge{o: o, ctx: ctx}
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		r := bufio.NewReaderSize(o.In, 64<<10)
		for {
			line, err := readLine(r)
			if len(bytes.TrimSpace(line)) > 0 {
				select {
				case lines <- line:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				readErr <- err
				return
			}
		}
	}()
	var err error
loop:
	for {
		select {
		case line := <-lines:
			b.fromClient(line)
		case err = <-readErr:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	b.close()
	if errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil
	}
	return err
}

// readLine reads one line of at most maxMessage bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxMessage {
			return nil, fmt.Errorf("a message is larger than %d bytes", maxMessage)
		}
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
}

// bridge relays one stdio client to a server's MCP over HTTP.
//
// Locks, in the order they may be taken: reopenMu, then mu; outMu is
// taken alone.
type bridge struct {
	o   BridgeOptions
	ctx context.Context

	outMu    sync.Mutex // one message per line on Out
	reopenMu sync.Mutex // one reopen at a time, across its requests

	// mu guards the fields below.
	mu      sync.Mutex
	session string             // Mcp-Session-Id
	version string             // the negotiated protocol version
	initReq []byte             // the client's initialize, to open a session again
	stream  context.CancelFunc // ends the GET stream
	// lost is set when a session was opened again, until the next tool
	// result tells the model that its sandboxes' state is gone.
	lost bool
	// noted are the tools whose structured result has a note (their
	// output schema, from tools/list, says so): a note set on another's
	// would break the schema, which clients check.
	noted map[string]bool
}

// message is what the bridge reads of a client's JSON-RPC message.
type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
}

// tool is the name of the tool a tools/call calls.
func (m message) tool() string {
	var p struct {
		Name string `json:"name"`
	}
	json.Unmarshal(m.Params, &p)
	return p.Name
}

// initialized is what the bridge reads of the answer to initialize.
type initialized struct {
	Result *struct {
		ProtocolVersion string `json:"protocolVersion"`
	} `json:"result"`
}

// fromClient sends one client message to the server. The initialize
// request goes first, alone: nothing else has a session before it.
func (b *bridge) fromClient(line []byte) {
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		b.o.Log.Warn("mcp bridge: the client sent a line that is not JSON; dropped", "err", err)
		return
	}
	if m.Method == "initialize" {
		b.mu.Lock()
		b.initReq = bytes.TrimSpace(line)
		b.mu.Unlock()
		b.send(line, m)
		return
	}
	go b.send(line, m)
}

// send POSTs a client message and relays the answer; a request that
// fails gets a JSON-RPC error that says why.
func (b *bridge) send(line []byte, m message) {
	sent := b.sessionID()
	resp, err := b.post(line, m.Method == "initialize")
	if err == nil && resp.StatusCode == http.StatusNotFound && m.Method != "initialize" && sent != "" {
		// The server ended the session (idle for mcp.session_timeout,
		// or restarted): open a new one with the client's initialize.
		resp.Body.Close()
		if err = b.reopen(sent); err == nil {
			resp, err = b.post(line, false)
		}
	}
	if err != nil {
		b.failRequest(m, "cannot reach airlock at "+b.o.URL+": "+err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b.failRequest(m, httpProblem(resp))
		return
	}
	b.relay(resp, m)
}

// post sends one message; opening says it is an initialize, whose
// answer names the session.
func (b *bridge) post(line []byte, opening bool) (*http.Response, error) {
	req, err := http.NewRequestWithContext(b.ctx, http.MethodPost, b.o.URL, bytes.NewReader(line))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if !opening {
		b.headers(req)
	} else if b.o.Key != "" {
		req.Header.Set("Authorization", "Bearer "+b.o.Key)
	}
	resp, err := b.o.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	if opening && resp.StatusCode < 300 {
		if id := resp.Header.Get(sessionHeader); id != "" {
			b.mu.Lock()
			b.session = id
			b.mu.Unlock()
		}
	}
	return resp, nil
}

// headers sets what every request of the session carries.
func (b *bridge) headers(req *http.Request) {
	if b.o.Key != "" {
		req.Header.Set("Authorization", "Bearer "+b.o.Key)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.session != "" {
		req.Header.Set(sessionHeader, b.session)
	}
	if b.version != "" {
		req.Header.Set("Mcp-Protocol-Version", b.version)
	}
}

func (b *bridge) sessionID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.session
}

// relay writes the messages of a response to method to the client: one
// JSON body, or the events of a stream. The answer to initialize sets the
// protocol version and starts the GET stream; the first tool result after
// a reopen says the state is gone.
func (b *bridge) relay(resp *http.Response, m message) {
	initialize := m.Method == "initialize"
	onMessage := func(data []byte) {
		switch m.Method {
		case "tools/call":
			data = b.noteLost(data, m.tool())
		case "tools/list":
			b.learnTools(data)
		}
		if initialize {
			var m initialized
			if json.Unmarshal(data, &m) == nil && m.Result != nil {
				b.mu.Lock()
				b.version = m.Result.ProtocolVersion
				b.mu.Unlock()
				b.startStream()
			}
		}
		b.toClient(data)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxMessage))
		if err == nil && len(bytes.TrimSpace(data)) > 0 {
			onMessage(data)
		}
	case "text/event-stream":
		readEvents(resp.Body, onMessage)
	}
}

// readEvents calls on with the data of each server-sent event of r,
// until r ends.
func readEvents(r io.Reader, on func([]byte)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var data []byte
	for {
		line, err := readLine(br)
		text := strings.TrimRight(string(line), "\r\n")
		switch {
		case text == "" && len(line) > 0:
			if len(data) > 0 {
				on(data)
			}
			data = nil
		case strings.HasPrefix(text, "data:"):
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(text, "data:"), " ")...)
		}
		if err != nil {
			if len(data) > 0 {
				on(data)
			}
			return err
		}
	}
}

// lostNote is what the model is told after the bridge opened a session
// again: it would otherwise take a fresh sandbox for the one it had.
const lostNote = "the airlock server had ended this MCP session (idle longer than mcp.session_timeout, or restarted), " +
	"and with it every sandbox session it opened; a new one was started: variables, imports, installed packages " +
	"and files of earlier calls are gone, so run any setup again"

// learnTools records which tools' structured results have a note, from
// data, an answer to tools/list.
func (b *bridge) learnTools(data []byte) {
	var list struct {
		Result *struct {
			Tools []struct {
				Name         string `json:"name"`
				OutputSchema *struct {
					Properties map[string]json.RawMessage `json:"properties"`
				} `json:"outputSchema"`
			} `json:"tools"`
		} `json:"result"`
	}
	if json.Unmarshal(data, &list) != nil || list.Result == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.noted == nil {
		b.noted = map[string]bool{}
	}
	for _, t := range list.Result.Tools {
		b.noted[t.Name] = t.OutputSchema != nil && t.OutputSchema.Properties["note"] != nil
	}
}

// noteLost adds lostNote to data, the result of a call of tool, if a
// session was opened again since the last one was told: first in its
// content, and as its structured content's note when its schema has one.
func (b *bridge) noteLost(data []byte, tool string) []byte {
	var msg map[string]json.RawMessage
	if json.Unmarshal(data, &msg) != nil || msg["result"] == nil {
		return data // a progress notification, or an error: the next result says it
	}
	var result map[string]json.RawMessage
	if json.Unmarshal(msg["result"], &result) != nil {
		return data
	}
	b.mu.Lock()
	lost, noted := b.lost, b.noted[tool]
	b.lost = false
	b.mu.Unlock()
	if !lost {
		return data
	}
	var content []json.RawMessage
	json.Unmarshal(result["content"], &content)
	block, _ := json.Marshal(map[string]string{"type": "text", "text": "note: " + lostNote + "\n"})
	result["content"], _ = json.Marshal(append([]json.RawMessage{block}, content...))
	var structured map[string]any
	if json.Unmarshal(result["structuredContent"], &structured) == nil && structured != nil && noted {
		note := lostNote
		if old, _ := structured["note"].(string); old != "" {
			note += "; " + old
		}
		structured["note"] = note
		result["structuredContent"], _ = json.Marshal(structured)
	}
	msg["result"], _ = json.Marshal(result)
	out, err := json.Marshal(msg)
	if err != nil {
		return data
	}
	return out
}

// toClient writes one message to the client, on one line.
func (b *bridge) toClient(data []byte) {
	var line bytes.Buffer
	if err := json.Compact(&line, data); err != nil {
		b.o.Log.Warn("mcp bridge: the server sent a message that is not JSON; dropped", "err", err)
		return
	}
	line.WriteByte('\n')
	b.outMu.Lock()
	defer b.outMu.Unlock()
	b.o.Out.Write(line.Bytes())
}

// failRequest answers a client request that could not be relayed with a
// JSON-RPC error (notifications and responses get none: they are logged).
func (b *bridge) failRequest(m message, why string) {
	b.o.Log.Warn("mcp bridge: " + why)
	if m.Method == "" || len(m.ID) == 0 {
		return
	}
	msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32000, "message": why}})
	b.toClient(msg)
}

// httpProblem says what an HTTP error from the server means.
func httpProblem(resp *http.Response) string {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	detail := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		detail = e.Error.Message
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return "airlock refused the API key (" + detail + "): give `airlock mcp --url` a key of that server in AIRLOCK_API_KEY or --key-file"
	default:
		return fmt.Sprintf("airlock answered %s: %s", resp.Status, detail)
	}
}

// reopen opens a new session with the client's initialize (its answer is
// the bridge's, not the client's) and says the client is initialized,
// unless another call did since session ended.
func (b *bridge) reopen(ended string) error {
	b.reopenMu.Lock()
	defer b.reopenMu.Unlock()
	b.mu.Lock()
	if b.session != ended {
		b.mu.Unlock()
		return nil
	}
	init := b.initReq
	b.session, b.version = "", ""
	if b.stream != nil {
		b.stream()
		b.stream = nil
	}
	b.mu.Unlock()
	if init == nil {
		return errors.New("the session ended, and the client never initialized one")
	}
	var req map[string]any
	json.Unmarshal(init, &req)
	req["id"] = "airlock-bridge-reopen"
	line, _ := json.Marshal(req)
	resp, err := b.post(line, true)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return errors.New(httpProblem(resp))
	}
	// Read the answer for its protocol version; it is not the client's.
	var answer []byte
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "text/event-stream" {
		readEvents(resp.Body, func(d []byte) { answer = d })
	} else {
		answer, _ = io.ReadAll(io.LimitReader(resp.Body, maxMessage))
	}
	resp.Body.Close()
	var m initialized
	if json.Unmarshal(answer, &m) != nil || m.Result == nil {
		return errors.New("the server did not open a new session")
	}
	b.mu.Lock()
	b.version = m.Result.ProtocolVersion
	b.lost = true
	b.mu.Unlock()
	b.o.Log.Warn("mcp bridge: the server had ended the MCP session; a new one was opened (its sandboxes start empty)")
	resp, err = b.post([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), false)
	if err != nil {
		return err
	}
	resp.Body.Close()
	b.startStream()
	return nil
}

// startStream keeps the GET stream of the session open, so that the
// server hears the client is still there (and can send it messages),
// until the session ends.
func (b *bridge) startStream() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stream != nil || b.session == "" {
		return
	}
	ctx, cancel := context.WithCancel(b.ctx)
	b.stream = cancel
	go func() {
		for wait := time.Second; ctx.Err() == nil; wait = min(2*wait, 30*time.Second) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.o.URL, nil)
			req.Header.Set("Accept", "text/event-stream")
			b.headers(req)
			resp, err := b.o.HTTP.Do(req)
			if err == nil {
				ok := resp.StatusCode == http.StatusOK
				if ok {
					wait = time.Second
					readEvents(resp.Body, b.toClient)
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotFound {
					return // no stream here, or the session is gone (the next POST reopens it)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}()
}

// close ends the remote session (DELETE): the server ends every sandbox
// session it opened now rather than after its idle timeout.
func (b *bridge) close() {
	b.mu.Lock()
	if b.stream != nil {
		b.stream()
	}
	b.mu.Unlock()
	if b.sessionID() == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, b.o.URL, nil)
	b.headers(req)
	resp, err := b.o.HTTP.Do(req)
	if err != nil {
		b.o.Log.Warn("mcp bridge: ending the session", "err", err)
		return
	}
	resp.Body.Close()
}
