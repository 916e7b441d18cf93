package client

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// InProcess returns a client whose requests h serves in this process,
// with no connection: what the MCP server uses to reach the API beside it,
// so that its calls pass through the API's own authentication, limits and
// error mapping. Responses stream (an NDJSON execution arrives event by
// event).
func InProcess(h http.Handler, opts ...Option) *Client {
	return New("http://airlock", append([]Option{WithHTTPClient(&http.Client{Transport: handlerTransport{h}})}, opts...)...)
}

type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	rw := &pipeResponse{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	in := req.Clone(req.Context())
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = "in-process"
	if in.Body == nil {
		in.Body = http.NoBody
	}
	go func() {
		defer func() {
			if p := recover(); p != nil && p != http.ErrAbortHandler {
				// Not a success: a 500 if nothing was sent yet, else a
				// body that breaks off.
				rw.WriteHeader(http.StatusInternalServerError)
				pw.CloseWithError(fmt.Errorf("handler panic: %v", p))
			}
			rw.WriteHeader(http.StatusOK) // a handler that wrote nothing
			pw.Close()
		}()
		t.h.ServeHTTP(rw, in)
	}()
	select {
	case <-rw.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", rw.status, http.StatusText(rw.status)), StatusCode: rw.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rw.sent, Body: pr, ContentLength: -1, Request: req,
	}, nil
}

// pipeResponse is the in-process ResponseWriter: the status and headers
// are handed over at the first write, the body through a pipe.
type pipeResponse struct {
	header http.Header
	sent   http.Header // the headers as they were at WriteHeader
	pw     *io.PipeWriter
	once   sync.Once
	status int
	ready  chan struct{}
}

func (r *pipeResponse) Header() http.Header { return r.header }

func (r *pipeResponse) WriteHeader(code int) {
	r.once.Do(func() {
		r.status, r.sent = code, r.header.Clone()
		close(r.ready)
	})
}

func (r *pipeResponse) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.pw.Write(b)
}

// Flush has nothing to do: every write is handed over as it is made.
func (r *pipeResponse) Flush() {}

// The deadlines the API sets on a connection have nothing to bound here:
// the other end is this process.
func (r *pipeResponse) SetReadDeadline(time.Time) error  { return nil }
func (r *pipeResponse) SetWriteDeadline(time.Time) error { return nil }
