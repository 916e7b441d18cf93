package v1

import (
	"net/http"

	"airlock/internal/apitype"
	"airlock/internal/httpapi"
)

// Code contexts: interpreters in a session's sandbox (session.CreateContext).

func (s *Server) createContext(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	var req apitype.CreateContextRequest
	if err := s.decode(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	c, err := sess.CreateContext(r.Context(), req)
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Location", "/v1/sessions/"+sess.ID()+"/contexts/"+c.ID)
	httpapi.WriteJSON(w, http.StatusCreated, c)
}

func (s *Server) listContexts(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	list, err := sess.Contexts()
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, apitype.ContextList{Contexts: list})
}

func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	if err := sess.DeleteContext(r.PathValue("ctx")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) getContext(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	c, err := sess.Context(r.PathValue("ctx"))
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, c)
}

func (s *Server) restartContext(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	c, err := sess.RestartContext(r.Context(), r.PathValue("ctx"))
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, c)
}
