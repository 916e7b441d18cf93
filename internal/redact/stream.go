package redact

import "unicode/utf8"

// Stream redacts a text that arrives in chunks, passing on what is
// decided: the output, concatenated, is exactly what Bytes makes of the
// whole text, however it was cut. It holds back up to Hold bytes (a match
// may still start there) until more text or Flush comes.
type Stream struct {
	r    *Redactor
	emit func([]byte)
	ctx  []byte // the last rune passed on (context for \b, ^ and $)
	pend []byte // text not passed on yet
	n    int
}

// Stream returns a Stream that passes redacted text to emit; nil for a
// nil Redactor.
func (r *Redactor) Stream(emit func([]byte)) *Stream {
	if r == nil {
		return nil
	}
	return &Stream{r: r, emit: emit}
}

// Count is the number of matches replaced so far.
func (s *Stream) Count() int {
	if s == nil {
		return 0
	}
	return s.n
}

// Write takes the next chunk of the text (it is copied).
func (s *Stream) Write(p []byte) {
	s.pend = append(s.pend, p...)
	s.run(false)
}

// Flush passes on everything held back: the text ended (or a pause in it
// must not hold output back, at the price of a match cut in two).
func (s *Stream) Flush() {
	s.run(true)
}

// run passes on what is decided: every match that starts where the text
// seen so far settles it, and the text before the earliest place a match
// might still start (see earliest).
func (s *Stream) run(final bool) {
	var out []byte
	// The rules whose literals the text holds: a rule without them
	// matches nowhere in it (nor in any part), so leaving it out changes
	// nothing.
	var c *combo
	// edge: where in pend the first match may start that the text so far
	// does not settle (see earliest); the same for every step below, as
	// the text's end does not move. consumed: what the steps passed on.
	edge, consumed := len(s.pend), 0
	if len(s.pend) > 0 {
		whole := append(append([]byte(nil), s.ctx...), s.pend...)
		c = s.r.combo(whole)
		if !final {
			edge = s.r.earliest(whole) - len(s.ctx)
		}
	}
	for len(s.pend) > 0 {
		window := s.pend
		if len(s.ctx) > 0 {
			window = append(append(make([]byte, 0, len(s.ctx)+len(s.pend)), s.ctx...), s.pend...)
		}
		// Matches starting before settled are known, and so is the text
		// before it: nothing unknown can start there.
		settled := len(window)
		if !final {
			settled = edge - consumed + len(s.ctx)
			free := settled - len(s.ctx)
			// Search when something may be passed on, and when much is
			// held, only for a good part of it (not at every byte).
			if free <= 0 || (len(s.pend) > 4096 && free < len(s.pend)/4) {
				break
			}
		}
		var m []int
		switch {
		case c == nil:
		case len(s.ctx) > 0:
			m = c.withCtx.FindSubmatchIndex(window)
			if m != nil {
				m[0] = firstGroup(m) // where the rule's match starts
			}
		default:
			m = c.re.FindSubmatchIndex(window)
		}
		if m != nil && m[0] < settled {
			// window coordinates to pend's: shift by the context.
			shift := len(s.ctx)
			pm := make([]int, len(m))
			for i, v := range m {
				pm[i] = v
				if v >= 0 {
					pm[i] = v - shift
				}
			}
			// withCtx's own groups: none; the rules' groups line up with re's.
			out = c.replace(out, s.pend, 0, pm)
			s.n++
			s.advance(pm[1])
			consumed += pm[1]
			continue
		}
		if final {
			out = append(out, s.pend...)
			s.advance(len(s.pend))
			break
		}
		cut := settled - len(s.ctx)
		if m != nil {
			cut = min(cut, m[0]-len(s.ctx))
		}
		cut = boundary(s.pend, cut)
		if cut <= 0 {
			break
		}
		out = append(out, s.pend[:cut]...)
		s.advance(cut)
		break
	}
	if len(out) > 0 {
		s.emit(out)
	}
}

// advance drops pend[:n], keeping its last rune as context.
func (s *Stream) advance(n int) {
	if n <= 0 {
		return
	}
	passed := s.pend[:n]
	_, size := utf8.DecodeLastRune(passed)
	s.ctx = append(s.ctx[:0], passed[len(passed)-size:]...)
	s.pend = append(s.pend[:0], s.pend[n:]...)
}

// firstGroup is where the first rule group that matched starts (withCtx's
// match starts at its context).
func firstGroup(m []int) int {
	for i := 2; i < len(m); i += 2 {
		if m[i] >= 0 {
			return m[i]
		}
	}
	return m[0]
}

// boundary lowers cut to the start of a UTF-8 sequence of b, so that no
// character is cut in two.
func boundary(b []byte, cut int) int {
	if cut <= 0 {
		return 0
	}
	if cut >= len(b) {
		return len(b)
	}
	// Back to a byte that is not a continuation byte (always a boundary),
	// then forward, character by character, to the last boundary <= cut.
	s := cut
	for s > 0 && !utf8.RuneStart(b[s]) {
		s--
	}
	at := s
	for at < cut {
		_, size := utf8.DecodeRune(b[at:])
		if at+size > cut {
			break
		}
		at += size
	}
	return at
}
