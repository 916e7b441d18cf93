package egress

import (
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"strings"

	"airlock/internal/secrets"
)

// modifyResponse readies an answer from a bound host for the sandbox:
// its body decoded (see decoded) and every echo of a secret in it
// replaced by its placeholder as it streams. Header fields are
// redactingWriter's.
func (ic *interception) modifyResponse(resp *http.Response) error {
	body, err := decoded(resp.Header, resp.Body)
	if err != nil {
		return err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{ic.g.secrets.Redact(body), resp.Body}
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	return nil
}

var errEncoding = errors.New("encoded answer")

// maxGzip bounds the gzip layers decoded: each holds a decompressor of
// about 40 KB, and a 64 KiB head could otherwise name some 13,000.
const maxGzip = 2

// decoded is body with the content codings h names undone: gzip (also
// x-gzip, any number of times) and identity, from every Content-Encoding
// field line and every item of a comma list. Any other coding, or gzip
// more than maxGzip times, is errEncoding: an answer the gate cannot
// read for echoes is refused, never passed. h loses its Content-Encoding.
func decoded(h http.Header, body io.Reader) (io.Reader, error) {
	n := 0
	for _, line := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(line, ",") {
			switch strings.ToLower(strings.TrimSpace(c)) {
			case "", "identity":
			case "gzip", "x-gzip":
				if n++; n > maxGzip {
					return nil, errEncoding
				}
			default:
				return nil, errEncoding
			}
		}
	}
	h.Del("Content-Encoding")
	for range n {
		body = &gunzip{src: body}
	}
	return body, nil
}

// gunzip decodes gzip from src, starting at its first read (the answer's
// head goes to the sandbox without waiting for its body).
type gunzip struct {
	src io.Reader
	z   *gzip.Reader
	err error
}

func (g *gunzip) Read(p []byte) (int, error) {
	if g.z == nil && g.err == nil {
		g.z, g.err = gzip.NewReader(g.src)
	}
	if g.err != nil {
		return 0, g.err
	}
	return g.z.Read(p)
}

// redactingWriter is the sandbox's side of one answer from a bound host:
// every header field that goes through it, in an informational (1xx)
// head, the final head or the trailers, has every echo of a secret
// replaced by its placeholder; a field whose name holds one is dropped.
// Flushes go through it too (nothing reaches the sandbox around it).
type redactingWriter struct {
	http.ResponseWriter
	ss    *secrets.Session
	wrote bool
}

func (w *redactingWriter) WriteHeader(code int) {
	redactHeader(w.ss, w.Header())
	if code >= 200 {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *redactingWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

func (w *redactingWriter) FlushError() error {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// trailers redacts the fields set once the body is over: the answer's
// trailers, sent when the handler returns.
func (w *redactingWriter) trailers() { redactHeader(w.ss, w.Header()) }

// redactHeader replaces every echo of a secret of ss in h's values by
// its placeholder, and drops a field whose name holds one.
func redactHeader(ss *secrets.Session, h http.Header) {
	for k, vs := range h {
		if ss.RedactString(k) != k {
			delete(h, k)
			continue
		}
		for i, v := range vs {
			vs[i] = ss.RedactString(v)
		}
	}
}
