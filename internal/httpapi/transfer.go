package httpapi

// File transfers are the one place a client sets the pace: an upload is
// read as fast as the client sends it, a download written as fast as it
// reads. So that no client can hold the server (its descriptors,
// goroutines, the sandbox's init), every transfer counts against a cap
// per server and per session, refused at once beyond them, and ends when
// its client has sent or read nothing for server.transfer_stall_timeout;
// a slow transfer that keeps moving goes on.

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"sync"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/session"
	"airlock/internal/workspace"
)

// Transfers counts the transfers in progress, of every API.
type Transfers struct {
	mu        sync.Mutex
	total     int
	bySession map[string]int
}

// InProgress is the number of transfers in progress, for /healthz.
func (t *Transfers) InProgress() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// Transfer is one upload or download in progress.
type Transfer struct {
	rc    *http.ResponseController
	stall time.Duration
	end   func()
}

// Begin counts a transfer for sess, keeps sess in use (a long transfer
// is not idleness) and starts its stall clock: on the request's reads for
// an upload, on the response's writes for a download. Over a cap it
// returns an error of ErrLimit (the connection closes after the answer).
// The caller must call Done.
func (t *Transfers) Begin(w http.ResponseWriter, sess *session.Session, upload bool, cfg config.Server) (*Transfer, error) {
	id := sess.ID()
	rc := http.NewResponseController(w)
	stall := cfg.TransferStallTimeout.D()
	// Only the direction the client drives: a download's connection is
	// read by the server in the background, with no deadline of ours.
	deadline := rc.SetWriteDeadline
	if upload {
		deadline = rc.SetReadDeadline
	}
	if err := deadline(time.Now().Add(stall)); err != nil {
		// Nothing could bound this transfer: refuse it rather than let it
		// hold the server.
		return nil, fmt.Errorf("api: cannot bound the transfer: %w", err)
	}
	t.mu.Lock()
	var over error
	switch {
	case t.total >= cfg.MaxConcurrentTransfers:
		over = fmt.Errorf("%w: %d file transfers are in progress, the server maximum (server.max_concurrent_transfers); try again later", errdefs.ErrLimit, t.total)
	case t.bySession[id] >= cfg.MaxSessionTransfers:
		over = fmt.Errorf("%w: %d file transfers of this session are in progress, the maximum per session (server.max_session_transfers); try again later", errdefs.ErrLimit, t.bySession[id])
	default:
		if t.bySession == nil {
			t.bySession = map[string]int{}
		}
		t.total++
		t.bySession[id]++
	}
	t.mu.Unlock()
	if over != nil {
		// Read nothing more of this connection: a body the client is
		// still sending (or not) must not keep it open.
		rc.SetReadDeadline(time.Now())
		w.Header().Set("Connection", "close")
		return nil, over
	}
	var once sync.Once
	unuse := sess.Use()
	return &Transfer{rc: rc, stall: stall, end: func() {
		once.Do(func() {
			unuse()
			t.mu.Lock()
			t.total--
			if t.bySession[id]--; t.bySession[id] <= 0 {
				delete(t.bySession, id)
			}
			t.mu.Unlock()
		})
	}}, nil
}

// Done ends the transfer: first its place under the caps, so that a
// client that has its answer may start the next transfer at once; then,
// once the last bytes are out, the write deadline, which must not fall
// on the connection's next request.
func (t *Transfer) Done() {
	t.end()
	t.rc.Flush()
	t.rc.SetWriteDeadline(time.Time{})
}

// Body returns an upload's body, its read deadline moved on as data
// arrives.
func (t *Transfer) Body(r io.Reader) io.Reader {
	return &stallReader{r: r, t: t, moved: time.Now()}
}

// Writer returns a download's response, its write deadline moved on as
// the client reads.
func (t *Transfer) Writer(w http.ResponseWriter) http.ResponseWriter {
	return &stallWriter{ResponseWriter: w, t: t, moved: time.Now()}
}

// due reports whether a deadline last moved at moved should be moved
// again: at most a few times per stall period, so that a busy transfer
// does not pay a timer reset for every buffer.
func (t *Transfer) due(moved, now time.Time) bool { return now.Sub(moved) >= t.stall/8 }

// stallReader moves the read deadline before each read, not after: the
// read that reaches the end of the body lets the server start its own
// background read, whose deadline must not be ours.
type stallReader struct {
	r     io.Reader
	t     *Transfer
	moved time.Time
	eof   bool
}

func (s *stallReader) Read(p []byte) (int, error) {
	if s.eof {
		return 0, io.EOF
	}
	if now := time.Now(); s.t.due(s.moved, now) {
		s.t.rc.SetReadDeadline(now.Add(s.t.stall))
		s.moved = now
	}
	n, err := s.r.Read(p)
	if err == io.EOF {
		s.eof = true
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("%w: the upload stalled: nothing arrived for %s (server.transfer_stall_timeout)", errdefs.ErrInvalidArgument, s.t.stall)
	}
	return n, err
}

// stallWriter moves the write deadline before each write.
type stallWriter struct {
	http.ResponseWriter
	t     *Transfer
	moved time.Time
}

func (s *stallWriter) Write(p []byte) (int, error) {
	if now := time.Now(); s.t.due(s.moved, now) {
		s.t.rc.SetWriteDeadline(now.Add(s.t.stall))
		s.moved = now
	}
	return s.ResponseWriter.Write(p)
}

func (s *stallWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// ServeFile answers the download of f, the workspace file p that e
// describes, as every API does; a file claiming more than disk bytes is
// refused (returned, for the caller's error shape) before anything is
// written.
func ServeFile(w http.ResponseWriter, r *http.Request, p string, f io.ReadSeeker, e workspace.Entry, disk int64) error {
	// The workspace holds at most disk bytes; a file that claims more is
	// sparse, and streaming its holes would cost the server for nothing.
	if e.Size > disk {
		return fmt.Errorf("%w: %s is a sparse file of %d bytes, more than the workspace's %d", errdefs.ErrTooLarge, p, e.Size, disk)
	}
	if mime.TypeByExtension(path.Ext(p)) == "" {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	// Files come from sandboxed code: a browser must never render one as
	// a page of the API's own origin.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'")
	// ServeContent streams from the descriptor opened beneath the root and
	// answers Range requests.
	http.ServeContent(w, r, path.Base(p), e.ModTime, f)
	return nil
}
