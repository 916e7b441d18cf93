package session

import (
	"unicode/utf8"

	"airlock/internal/redact"
)

// stream keeps one execution's stdout or stderr: the first max bytes, a
// truncation flag, and live chunks that never split a UTF-8 sequence.
type stream struct {
	max       int
	buf       []byte
	truncated bool
	pending   []byte // an incomplete UTF-8 sequence held back from live output
	live      func([]byte)
	overflow  func()
	// red, when output is redacted, stands between the stream and live:
	// it holds back what a match may still span.
	red *redact.Stream
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
	room := s.max - len(s.buf)
	if len(p) > room {
		p = p[:max(room, 0)]
		if !s.truncated {
			s.truncated = true
			if s.overflow != nil {
				s.overflow()
			}
		}
	}
	if len(p) == 0 {
		return
	}
	s.buf = append(s.buf, p...)
	if s.live == nil {
		return
	}
	chunk := append(s.pending, p...)
	cut := completeUTF8(chunk)
	s.pending = append([]byte(nil), chunk[cut:]...)
	if cut > 0 {
		s.send(chunk[:cut])
	}
}

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
