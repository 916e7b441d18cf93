package v1

import (
	"fmt"
	"net/http"
	"strconv"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
	"airlock/internal/identity"
	"airlock/internal/notebook"
	"airlock/internal/session"
)

// history is GET /v1/sessions/{id}/history: the session's executions and
// commands after ?after=SEQ, with an ETag (If-None-Match answers 304
// while nothing changed: a console polls cheaply).
func (s *Server) history(w http.ResponseWriter, r *http.Request) {
	h, after, ok := s.historyOf(w, r)
	if !ok {
		return
	}
	tag := h.ETag(after)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("ETag", tag)
	if r.Header.Get("If-None-Match") == tag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, h.View(after))
}

// notebookExport is GET /v1/sessions/{id}/notebook: the history as a
// Jupyter notebook (nbformat 4.5), to download.
func (s *Server) notebookExport(w http.ResponseWriter, r *http.Request) {
	h, after, ok := s.historyOf(w, r)
	if !ok {
		return
	}
	view := h.View(after)
	body := notebook.From(view).Marshal()
	w.Header().Set("Content-Type", "application/x-ipynb+json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Disposition", `attachment; filename="`+notebookName(view.Session)+`"`)
	w.WriteHeader(http.StatusOK)
	w.Write(httpapi.EscapeControls(body))
}

// notebookName is the file name of a session's notebook: its id, of the
// characters ids are made of (saneID), else "session".
func notebookName(id string) string {
	if id == "" || len(id) > 128 || !httpapi.SaneID(id) {
		id = "session"
	}
	return "airlock-" + id + ".ipynb"
}

// historyOf finds the request's session history (live, or ended and
// kept) and its ?after.
func (s *Server) historyOf(w http.ResponseWriter, r *http.Request) (*session.HistoryReader, int64, bool) {
	var after int64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			fail(w, fmt.Errorf("%w: after %q must be an entry's seq (0 or more)", errdefs.ErrInvalidArgument, httpapi.Truncate(v)))
			return nil, 0, false
		}
		after = n
	}
	h, err := s.m.History(r.Context(), r.PathValue("id"))
	if err != nil {
		s.denied(w, r, err)
		return nil, 0, false
	}
	return h, after, true
}

// whoami is GET /v1/whoami: who the request's credentials are, for the
// console (and anyone checking a key).
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	who, _ := identity.From(r.Context())
	httpapi.WriteJSON(w, http.StatusOK, apitype.Whoami{Tenant: who.Tenant, KeyID: who.KeyID, Admin: who.Admin, Auth: s.cfg.Server.Auth, Console: s.cfg.Console.Enabled})
}
