package httpapi

import (
	"net/http"
	"sync"
)

// Stream writes a response as frames (NDJSON lines, Connect envelopes),
// each flushed as it goes out. Frames are queued by whichever goroutine
// produces them and written by one goroutine, so a slow client never
// blocks the sandbox's output pipes; the queue is bounded by what
// produces it (an execution's own output caps).
type Stream struct {
	w           http.ResponseWriter
	rc          *http.ResponseController
	contentType string
	mu          sync.Mutex
	cond        *sync.Cond
	queue       [][]byte
	closed      bool
	started     bool
	done        chan struct{}
}

// NewStream streams frames to w as a 200 of contentType, from the first
// Send on.
func NewStream(w http.ResponseWriter, contentType string) *Stream {
	s := &Stream{w: w, rc: http.NewResponseController(w), contentType: contentType, done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// Send queues one frame (the caller's to keep unchanged).
func (s *Stream) Send(frame []byte) {
	s.mu.Lock()
	if !s.started {
		s.started = true
		go s.loop()
	}
	s.queue = append(s.queue, frame)
	s.cond.Signal()
	s.mu.Unlock()
}

// Started reports whether a frame was sent (the status is then 200).
func (s *Stream) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

func (s *Stream) loop() {
	defer close(s.done)
	h := s.w.Header()
	h.Set("Content-Type", s.contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	broken := false
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closed {
			s.cond.Wait()
		}
		batch := s.queue
		s.queue = nil
		closed := s.closed
		s.mu.Unlock()
		if !broken {
			for _, b := range batch {
				if _, err := s.w.Write(b); err != nil {
					broken = true // the client left; keep draining
					break
				}
			}
			if !broken {
				s.rc.Flush()
			}
		}
		if closed && len(batch) == 0 {
			return
		}
	}
}

// Finish waits until every frame is written (the writer must not outlive
// the handler). It reports whether any was.
func (s *Stream) Finish() bool {
	s.mu.Lock()
	started := s.started
	s.closed = true
	s.cond.Signal()
	s.mu.Unlock()
	if started {
		<-s.done
	}
	return started
}
