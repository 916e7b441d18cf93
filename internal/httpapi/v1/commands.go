package v1

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
	"airlock/internal/session"
)

// Shell commands in a session's sandbox (session.RunCommand).

func (s *Server) runCommand(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	var req apitype.CommandRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	if req.Background {
		// The command outlives the request.
		res, err := sess.RunCommand(r.Context(), req, nil)
		if err != nil {
			fail(w, err)
			return
		}
		w.Header().Set("Location", "/v1/sessions/"+sess.ID()+"/commands/"+res.ID)
		httpapi.WriteJSON(w, http.StatusCreated, res)
		return
	}
	respond(w, r, func(emit func(apitype.Event)) (any, error) { return sess.RunCommand(r.Context(), req, emit) })
}

func (s *Server) listCommands(w http.ResponseWriter, r *http.Request) {
	if sess, ok := s.session(w, r); ok {
		httpapi.WriteJSON(w, http.StatusOK, apitype.CommandList{Commands: sess.Commands()})
	}
}

// getCommand describes a command; ?wait=30s waits up to that long for it
// to end (at most the server's maximum timeout).
func (s *Server) getCommand(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	var wait time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := config.ParseDuration(v)
		if err != nil || d.D() < 0 || d.D() > s.cfg.Max.Timeout.D() {
			fail(w, fmt.Errorf("%w: query parameter wait=%q: want a duration up to %s", errdefs.ErrInvalidArgument, v, s.cfg.Max.Timeout))
			return
		}
		wait = d.D()
	}
	res, err := sess.Command(r.Context(), r.PathValue("cid"), wait)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, res)
}

// commandAction is a POST .../commands/{cid}/<action> taking a JSON
// body, answered with 204: signal, stdin, resize. A command's WebSocket
// takes the same actions as messages (terminalInput).
func commandAction[T any](act func(sess *session.Session, cid string, req T) error) func(*Server, http.ResponseWriter, *http.Request) {
	return func(s *Server, w http.ResponseWriter, r *http.Request) {
		sess, ok := s.session(w, r)
		if !ok {
			return
		}
		var req T
		if err := s.decode(w, r, &req); err != nil {
			fail(w, err)
			return
		}
		if err := act(sess, r.PathValue("cid"), req); err != nil {
			fail(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func signalCommand(sess *session.Session, cid string, req apitype.SignalRequest) error {
	return sess.SignalCommand(cid, req.Signal)
}

func commandStdin(sess *session.Session, cid string, req apitype.StdinRequest) error {
	data, err := stdinData(req.Data, req.DataBase64)
	if err != nil {
		return err
	}
	return sess.CommandStdin(cid, data, req.Close)
}

func resizeCommand(sess *session.Session, cid string, req apitype.PTYSize) error {
	return sess.ResizeCommand(cid, req)
}

// replayQuery reads ?replay= (true when absent).
func replayQuery(w http.ResponseWriter, r *http.Request) (bool, bool) {
	if r.URL.Query().Get("replay") == "" {
		return true, true
	}
	return boolQuery(w, r, "replay")
}

// commandEvents follows a command's output as NDJSON (session.AttachCommand):
// written as it comes, so that a client that reads slowly falls behind
// and is detached rather than queued for.
func (s *Server) commandEvents(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	replay, ok := replayQuery(w, r)
	if !ok {
		return
	}
	rc := http.NewResponseController(w)
	started := false
	var werr error
	emit := func(ev apitype.Event) {
		if !started {
			started = true
			h := w.Header()
			h.Set("Content-Type", "application/x-ndjson")
			h.Set("Cache-Control", "no-store")
			h.Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
		}
		if werr == nil {
			if _, werr = w.Write(eventLine(ev)); werr == nil {
				werr = rc.Flush()
			}
		}
	}
	err := sess.AttachCommand(r.Context(), r.PathValue("cid"), replay, emit)
	switch {
	case err == nil || r.Context().Err() != nil:
	case started:
		emit(failedEvent(err))
	default:
		fail(w, err)
	}
}

// eventLine is an event as a line of NDJSON, control characters escaped.
func eventLine(ev apitype.Event) []byte {
	b, _ := httpapi.EncodeJSON(ev) // an Event always encodes
	return b
}

// failedEvent is the event that ends a stream whose request failed.
func failedEvent(err error) apitype.Event {
	return apitype.Event{Type: apitype.EventFailed, Error: &apitype.ExecError{Name: errdefs.Code(err), Value: errdefs.Message(err), Traceback: []string{}}}
}

// maxTerminalInput caps one WebSocket message of a command's client.
const maxTerminalInput = 1 << 20

// commandSocket is a command's terminal over a WebSocket: the command's
// events go out as text messages (one JSON event each, as in
// commandEvents), and the client's TerminalInput messages write its
// stdin, resize its terminal or signal it. The socket closes after the
// end event; the command outlives a client that leaves.
func (s *Server) commandSocket(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	replay, ok := replayQuery(w, r)
	if !ok {
		return
	}
	cid := r.PathValue("cid")
	if _, err := sess.Command(r.Context(), cid, 0); err != nil {
		fail(w, err)
		return
	}
	// Same origin only (the library's default): a page elsewhere must
	// not drive a terminal with a browser's credentials.
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered the client
	}
	defer c.CloseNow()
	c.SetReadLimit(maxTerminalInput)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var mu sync.Mutex // one writer at a time: events, and rejections
	send := func(ev apitype.Event) {
		mu.Lock()
		defer mu.Unlock()
		if err := c.Write(ctx, websocket.MessageText, eventLine(ev)); err != nil {
			cancel()
		}
	}
	go func() {
		defer cancel() // the client closed or broke the socket
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			if err := terminalInput(sess, cid, typ, b); err != nil {
				send(apitype.Event{Type: apitype.EventRejected, Error: &apitype.ExecError{Name: errdefs.Code(err), Value: errdefs.Message(err), Traceback: []string{}}})
			}
		}
	}()
	err = sess.AttachCommand(ctx, cid, replay, send)
	switch {
	case err == nil:
		c.Close(websocket.StatusNormalClosure, "the command ended")
	case ctx.Err() == nil:
		send(failedEvent(err))
		c.Close(websocket.StatusTryAgainLater, "detached; attach again")
	}
}

// terminalInput applies one message of a command's WebSocket client.
func terminalInput(sess *session.Session, cid string, typ websocket.MessageType, b []byte) error {
	var in apitype.TerminalInput
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if typ != websocket.MessageText || dec.Decode(&in) != nil {
		return fmt.Errorf("%w: a message is one JSON object: {\"type\": \"stdin\", \"data\": ...}, {\"type\": \"resize\", \"cols\": 80, \"rows\": 24} or {\"type\": \"signal\", \"signal\": \"SIGINT\"}", errdefs.ErrInvalidArgument)
	}
	switch in.Type {
	case apitype.InputStdin:
		return commandStdin(sess, cid, apitype.StdinRequest{Data: in.Data, DataBase64: in.DataBase64, Close: in.Close})
	case apitype.InputResize:
		return resizeCommand(sess, cid, apitype.PTYSize{Cols: in.Cols, Rows: in.Rows})
	case apitype.InputSignal:
		return signalCommand(sess, cid, apitype.SignalRequest{Signal: in.Signal})
	}
	if len(in.Type) > 32 {
		in.Type = in.Type[:32]
	}
	return fmt.Errorf("%w: unknown message type %q: want stdin, resize or signal", errdefs.ErrInvalidArgument, in.Type)
}

// stdinData is a request's input: its text, then its base64 bytes.
func stdinData(text, b64 string) ([]byte, error) {
	data := []byte(text)
	if b64 != "" {
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("%w: data_base64 is not base64", errdefs.ErrInvalidArgument)
		}
		data = append(data, b...)
	}
	return data, nil
}
