package e2b

import (
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"

	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
	"airlock/internal/workspace"
)

// home is E2B's working directory, the session's /workspace.
const home = "/home/user"

// wsPath is an E2B path in the session's /workspace: absolute under
// /home/user or /workspace (the same directory), or relative to it; and
// the prefix the caller used, in which paths are shown back.
func wsPath(p string) (rel, prefix string, err error) {
	prefix = home
	switch {
	case p == home || strings.HasPrefix(p, home+"/"):
		p = "/workspace" + strings.TrimPrefix(p, home)
	case p == "~" || strings.HasPrefix(p, "~/"):
		p = "/workspace" + strings.TrimPrefix(p, "~")
	case p == "/workspace" || strings.HasPrefix(p, "/workspace/"):
		prefix = "/workspace"
	case strings.HasPrefix(p, "/"):
		return "", "", fmt.Errorf("%w: path %q: an airlock sandbox's files are under /home/user (the same directory as /workspace)", errdefs.ErrInvalidArgument, httpapi.Truncate(p))
	}
	rel, err = workspace.Clean(p)
	return rel, prefix, err
}

func shown(prefix, rel string) string {
	if rel == "" {
		return prefix
	}
	return prefix + "/" + rel
}

// fileJSON is envd's EntryInfo of an upload's answer.
type fileJSON struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// download is envd's GET /files?path=: the file's bytes.
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	sess, _ := sessionOf(r)
	rel, _, err := wsPath(r.URL.Query().Get("path"))
	if err != nil {
		failControl(w, err)
		return
	}
	t, err := s.edge.Transfers.Begin(w, sess, false, s.cfg.Server)
	if err != nil {
		failControl(w, err)
		return
	}
	defer t.Done()
	w = t.Writer(w)
	f, e, err := sess.Files(r.Context()).Open(rel)
	if err != nil {
		failControl(w, err)
		return
	}
	defer f.Close()
	if err := httpapi.ServeFile(w, r, rel, f, e, int64(sess.Limits().Disk)); err != nil {
		failControl(w, err)
	}
}

// maxParts bounds the files of one multipart upload.
const maxParts = 1000

// upload is envd's POST /files: multipart (part "file", its filename the
// path when ?path= is absent) or, from envd 0.5.7, the raw bytes of
// ?path= (gzip-encoded if it says so).
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	sess, _ := sessionOf(r)
	max := min(int64(s.cfg.Server.MaxFileBytes), int64(sess.Limits().Disk))
	t, err := s.edge.Transfers.Begin(w, sess, true, s.cfg.Server)
	if err != nil {
		failControl(w, err)
		return
	}
	defer t.Done()
	body := t.Body(r.Body)
	files := sess.Files(r.Context())
	var out []fileJSON
	write := func(p string, src io.Reader) error {
		rel, prefix, err := wsPath(p)
		if err != nil {
			return err
		}
		if rel == "" {
			return fmt.Errorf("%w: name a file under %s", errdefs.ErrInvalidArgument, prefix)
		}
		if dir := path.Dir(rel); dir != "." {
			if err := files.Mkdir(dir); err != nil {
				return err
			}
		}
		if _, err := files.Write(rel, src, max, 0o644); err != nil {
			return err
		}
		out = append(out, fileJSON{Name: path.Base(rel), Type: "file", Path: shown(prefix, rel)})
		return nil
	}
	q := r.URL.Query().Get("path")
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case mt == "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
		for n := 0; ; n++ {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				failControl(w, fmt.Errorf("%w: the multipart body cannot be read: %v", errdefs.ErrInvalidArgument, err))
				return
			}
			if n >= maxParts {
				failControl(w, fmt.Errorf("%w: more than %d files in one upload", errdefs.ErrTooLarge, maxParts))
				return
			}
			// Not part.FileName(): it keeps only the name's last element.
			_, cd, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			p := q
			if p == "" {
				p = cd["filename"]
			}
			if err := write(p, part); err != nil {
				failControl(w, err)
				return
			}
		}
	default:
		src := body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(body)
			if err != nil {
				failControl(w, fmt.Errorf("%w: the gzip body cannot be read: %v", errdefs.ErrInvalidArgument, err))
				return
			}
			src = zr
		}
		if err := write(q, src); err != nil {
			failControl(w, err)
			return
		}
	}
	if len(out) == 0 {
		failControl(w, fmt.Errorf("%w: the upload holds no file (a multipart part named \"file\")", errdefs.ErrInvalidArgument))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// rpc reports whether r is one of envd's Connect RPCs.
func rpc(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/filesystem.Filesystem/") || strings.HasPrefix(r.URL.Path, "/process.Process/")
}

// streaming reports whether r is a Connect streaming call (enveloped
// messages both ways).
func streaming(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt == "application/connect+json"
}

// connectCodes are Connect's codes of errdefs' statuses.
var connectCodes = map[int]string{
	http.StatusBadRequest: "invalid_argument", http.StatusUnauthorized: "unauthenticated", http.StatusForbidden: "permission_denied",
	http.StatusNotFound: "not_found", http.StatusGone: "not_found", http.StatusConflict: "already_exists",
	http.StatusRequestEntityTooLarge: "resource_exhausted", http.StatusTooManyRequests: "resource_exhausted",
	http.StatusNotImplemented: "unimplemented", http.StatusServiceUnavailable: "unavailable", http.StatusGatewayTimeout: "deadline_exceeded",
	http.StatusMethodNotAllowed: "unimplemented", http.StatusRequestTimeout: "deadline_exceeded",
}

// connectStatus is the HTTP status Connect gives a unary error's code.
var connectStatus = map[string]int{
	"invalid_argument": 400, "unauthenticated": 401, "permission_denied": 403, "not_found": 404, "already_exists": 409,
	"resource_exhausted": 429, "unimplemented": 501, "unavailable": 503, "deadline_exceeded": 504, "internal": 500,
}

type connectError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func connectErrorOf(w http.ResponseWriter, err error) connectError {
	kind, msg := httpapi.Report(w, err)
	code, ok := connectCodes[kind.HTTPStatus]
	if !ok {
		code = "internal"
	}
	return connectError{Code: code, Message: msg}
}

// failRPC answers err as Connect does: a unary call with the code's
// status and {"code","message"}; a streaming one with 200 and an
// end-of-stream message holding the error.
func failRPC(w http.ResponseWriter, r *http.Request, err error) {
	ce := connectErrorOf(w, err)
	if streaming(r) {
		w.Header().Set("Content-Type", "application/connect+json")
		w.WriteHeader(http.StatusOK)
		w.Write(endFrame(&ce))
		return
	}
	httpapi.WriteJSON(w, connectStatus[ce.Code], ce)
}

// frame is one Connect envelope of msg (flags 0: a message).
func frame(flags byte, msg any) []byte {
	b, err := httpapi.EncodeJSON(msg)
	if err != nil {
		b = []byte("{}")
	}
	b = []byte(strings.TrimSuffix(string(b), "\n"))
	out := make([]byte, 5, 5+len(b))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

// endFrame ends a stream: {} or {"error":…}.
func endFrame(ce *connectError) []byte {
	if ce == nil {
		return frame(2, struct{}{})
	}
	return frame(2, map[string]any{"error": ce})
}

// readRPC decodes the request message of r: a JSON body (unary) or one
// envelope (streaming), under the server's cap. Unknown fields are
// ignored (envd's protocol grows).
func (s *Server) readRPC(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := httpapi.ReadBody(w, r, int64(s.cfg.Server.MaxBodyBytes))
	if err != nil {
		return err
	}
	if streaming(r) {
		if len(data) < 5 {
			return fmt.Errorf("%w: a Connect streaming request holds one enveloped message", errdefs.ErrInvalidArgument)
		}
		if data[0]&1 != 0 {
			return fmt.Errorf("%w: compressed Connect messages are not supported", errdefs.ErrUnsupported)
		}
		n := binary.BigEndian.Uint32(data[1:5])
		if uint64(n) != uint64(len(data)-5) {
			return fmt.Errorf("%w: the Connect envelope's length %d is not its message's %d", errdefs.ErrInvalidArgument, n, len(data)-5)
		}
		data = data[5:]
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: request message: %v", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

// entryInfo is envd's EntryInfo.
type entryInfo struct {
	Name          string `json:"name"`
	Type          string `json:"type"`
	Path          string `json:"path"`
	Size          string `json:"size"`
	Mode          uint32 `json:"mode"`
	Permissions   string `json:"permissions"`
	Owner         string `json:"owner"`
	Group         string `json:"group"`
	ModifiedTime  string `json:"modifiedTime"`
	SymlinkTarget string `json:"symlinkTarget,omitempty"`
}

var fileTypes = map[string]string{"file": "FILE_TYPE_FILE", "dir": "FILE_TYPE_DIRECTORY", "symlink": "FILE_TYPE_SYMLINK"}

func entryOf(prefix string, e workspace.Entry) entryInfo {
	perm, _ := strconv.ParseUint(e.Mode, 8, 32)
	t, ok := fileTypes[e.Type]
	if !ok {
		t = "FILE_TYPE_UNSPECIFIED"
	}
	return entryInfo{Name: path.Base(shown(prefix, e.Path)), Type: t, Path: shown(prefix, e.Path), Size: strconv.FormatInt(e.Size, 10),
		Mode: uint32(perm), Permissions: permissions(e.Type, uint32(perm)), Owner: "user", Group: "user",
		ModifiedTime: e.ModTime.UTC().Format("2006-01-02T15:04:05.999999999Z")}
}

// permissions is ls's form of a mode ("drwxr-xr-x").
func permissions(typ string, perm uint32) string {
	b := []byte("----------")
	switch typ {
	case "dir":
		b[0] = 'd'
	case "symlink":
		b[0] = 'l'
	}
	for i, c := range "rwxrwxrwx" {
		if perm&(1<<(8-i)) != 0 {
			b[i+1] = byte(c)
		}
	}
	return string(b)
}
