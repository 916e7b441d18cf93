package v1

import (
	"net/http"

	"airlock/internal/httpapi"
)

// Templates: the root filesystems a request may name (session.Templates).

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	list, err := s.m.Templates(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, list)
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := s.m.Template(r.Context(), r.PathValue("name"))
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, t)
}
