package v1

import (
	"fmt"
	"net/http"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
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
		writeJSON(w, http.StatusCreated, res)
		return
	}
	respond(w, r, func(emit func(apitype.Event)) (any, error) { return sess.RunCommand(r.Context(), req, emit) })
}

func (s *Server) listCommands(w http.ResponseWriter, r *http.Request) {
	if sess, ok := s.session(w, r); ok {
		writeJSON(w, http.StatusOK, apitype.CommandList{Commands: sess.Commands()})
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
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) signalCommand(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	var req apitype.SignalRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	if err := sess.SignalCommand(r.PathValue("cid"), req.Signal); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) commandStdin(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	var req apitype.StdinRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	if err := sess.CommandStdin(r.PathValue("cid"), []byte(req.Data), req.Close); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
