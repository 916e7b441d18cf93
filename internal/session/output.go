package session

import (
	"fmt"
	"unicode/utf8"

	"airlock/internal/apitype"
	"airlock/internal/redact"
)

// stream keeps one execution's stdout or stderr: the first max bytes, a
// truncation flag and the count of bytes dropped past max, and live
// chunks that never split a UTF-8 sequence.
type stream struct {
	max       int
	buf       []byte
	truncated bool
	dropped   int64
	pending   []byte // an incomplete UTF-8 sequence held back from live output
	live      func([]byte)
	// name is the stream's ("stdout"); full, if set, hears once that the
	// stream reached max, after the last chunk sent live.
	name string
	full func(apitype.Event)
	// red, when output is redacted, stands between the stream and live:
	// it holds back what a match may still span.
	red *redact.Stream
	// beyond streams live past max too (a terminal's: its client
	// follows it for as long as it runs); buf still keeps only max.
	beyond bool
}

// redactLive puts r between the stream and its live output.
func (s *stream) redactLive(r *redact.Redactor) {
	if r != nil && s.live != nil {
		s.red = r.Stream(s.live)
	}
}

// send passes a chunk on live, through the redactor if any.
func (s *stream) send(b []byte) {
	if s.red != nil {
		s.red.Write(b)
		return
	}
	s.live(b)
}

func (s *stream) write(p []byte) {
	room := max(s.max-len(s.buf), 0)
	cut := len(p) > room
	all := p
	if cut {
		s.dropped += int64(len(p) - room)
		p = p[:room]
	}
	s.buf = append(s.buf, p...)
	if s.beyond {
		p = all
	}
	if len(p) > 0 {
		if s.live != nil {
			chunk := append(s.pending, p...)
			n := completeUTF8(chunk)
			s.pending = append([]byte(nil), chunk[n:]...)
			if n > 0 {
				s.send(chunk[:n])
			}
		}
	}
	if cut && !s.truncated {
		s.truncated = true
		if s.full != nil && !s.beyond {
			s.flush() // nothing more comes: what is held back goes first
			s.full(apitype.Event{Type: apitype.EventTruncated, Stream: s.name,
				Text: fmt.Sprintf("%s reached max_output (%d bytes): the rest is dropped and counted, and the code runs on", s.name, s.max)})
		}
	}
}

// drop counts n bytes dropped unread past the cap.
func (s *stream) drop(n int) { s.dropped += int64(n) }

// flush emits whatever is held back, even if incomplete.
func (s *stream) flush() {
	if s.live != nil && len(s.pending) > 0 {
		s.send(s.pending)
	}
	s.pending = nil
	if s.red != nil {
		s.red.Flush()
	}
}

// completeUTF8 returns the length of the longest prefix of b that does not
// end in the middle of a UTF-8 sequence.
func completeUTF8(b []byte) int {
	n := len(b)
	for i := 1; i <= 3 && i <= n; i++ {
		c := b[n-i]
		if c < 0x80 {
			return n // ASCII: complete
		}
		if c >= 0xC0 { // a leading byte: complete if its sequence fits
			need := 2
			if c >= 0xE0 {
				need = 3
			}
			if c >= 0xF0 {
				need = 4
			}
			if need > i {
				return n - i
			}
			return n
		}
	}
	return n
}

func toValidUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return string([]rune(string(b))) // invalid bytes become U+FFFD
}
