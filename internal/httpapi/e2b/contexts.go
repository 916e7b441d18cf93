package e2b

import (
	"fmt"
	"net/http"
	"strings"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
)

// languageOf is airlock's name of a code interpreter language.
func languageOf(l string) string {
	switch l {
	case "js", "node", "nodejs":
		return apitype.JavaScript
	case "sh":
		return apitype.Bash
	}
	return l
}

// executeOf is the session's execution of an E2B one: in the context
// named, or the language's default context (started on first use).
func executeOf(req executeRequest) (apitype.ExecuteRequest, error) {
	if req.ContextID != "" && req.Language != "" {
		return apitype.ExecuteRequest{}, fmt.Errorf("%w: context_id or language, not both", errdefs.ErrInvalidArgument)
	}
	return apitype.ExecuteRequest{Code: req.Code, Context: req.ContextID, Language: languageOf(req.Language), Env: req.EnvVars}, nil
}

// contextJSON is the code interpreter's Context.
type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func contextOf(c apitype.CodeContext) contextJSON {
	cwd := c.Cwd
	if cwd == "/workspace" || strings.HasPrefix(cwd, "/workspace/") {
		cwd = home + strings.TrimPrefix(cwd, "/workspace")
	}
	return contextJSON{ID: c.ID, Language: c.Language, Cwd: cwd}
}

// contexts serves the code interpreter's /contexts on the session's
// code contexts: POST creates one (language, cwd), GET lists them,
// DELETE /contexts/{id} ends one.
func (s *Server) contexts(w http.ResponseWriter, r *http.Request) {
	sess, _ := sessionOf(r)
	id, sub := strings.TrimPrefix(r.URL.Path, "/contexts"), ""
	id = strings.TrimPrefix(id, "/")
	id, sub, _ = strings.Cut(id, "/")
	switch {
	case id == "" && r.Method == http.MethodPost:
		var req struct {
			Language string `json:"language"`
			Cwd      string `json:"cwd"`
		}
		if err := s.decode(w, r, &req); err != nil {
			failControl(w, err)
			return
		}
		cr := apitype.CreateContextRequest{Language: languageOf(req.Language)}
		if req.Cwd != "" {
			rel, _, err := wsPath(req.Cwd)
			if err != nil {
				failControl(w, err)
				return
			}
			cr.Cwd = rel
		}
		c, err := sess.CreateContext(r.Context(), cr)
		if err != nil {
			failControl(w, err)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, contextOf(*c))
	case id == "" && r.Method == http.MethodGet:
		list, err := sess.Contexts()
		if err != nil {
			failControl(w, err)
			return
		}
		out := []contextJSON{}
		for _, c := range list {
			if c.State != apitype.ContextEnded {
				out = append(out, contextOf(c))
			}
		}
		httpapi.WriteJSON(w, http.StatusOK, out)
	case id != "" && sub == "" && r.Method == http.MethodDelete:
		if err := sess.DeleteContext(id); err != nil {
			failControl(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case id != "" && sub == "restart" && r.Method == http.MethodPost:
		// A fresh interpreter in the same context: its id, language,
		// directory and environment.
		if _, err := sess.RestartContext(r.Context(), id); err != nil {
			failControl(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		failControl(w, fmt.Errorf("%w: %s %s", errdefs.ErrMethodNotAllowed, r.Method, httpapi.Truncate(r.URL.Path)))
	}
}
