package secrets

import (
	"bytes"
	"io"
)

// Replacer reads r with every old[i] replaced by new[i], however the
// reads split them: it holds back the bytes that could start a match
// until the match is decided: an end of what was read that starts one.
// At one position the longest old wins.
//
// An old may have edges (see form): a base64 character just before it
// (lead) or just after it (trail) is replaced with it, since it carries
// bits of the value mixed with its neighbours'. A stream that ends in a
// base64 character then holds that one character back until the next
// read says whether a match follows it.
type Replacer struct {
	r           io.Reader
	old, new    [][]byte
	lead, trail []bool // by old; nil: no edges
	longest     int
	in, out     []byte // read and not scanned; scanned and not returned
	buf         []byte
	err         error
}

// NewReplacer replaces old[i] by new[i] in what r gives.
func NewReplacer(r io.Reader, old, new [][]byte) *Replacer {
	rp := &Replacer{r: r, old: old, new: new, buf: make([]byte, 32<<10)}
	for _, o := range old {
		rp.longest = max(rp.longest, len(o))
	}
	return rp
}

// newFormReplacer replaces each of forms by the new of the same index,
// with their edges.
func newFormReplacer(r io.Reader, forms []form, new [][]byte) *Replacer {
	old := make([][]byte, len(forms))
	for i, f := range forms {
		old[i] = []byte(f.text)
	}
	rp := NewReplacer(r, old, new)
	rp.lead, rp.trail = make([]bool, len(forms)), make([]bool, len(forms))
	for i, f := range forms {
		rp.lead[i], rp.trail[i] = f.lead, f.trail
	}
	return rp
}

func (rp *Replacer) Read(p []byte) (int, error) {
	for len(rp.out) == 0 {
		if rp.err != nil && len(rp.in) == 0 {
			return 0, rp.err
		}
		if rp.err == nil {
			n, err := rp.r.Read(rp.buf)
			rp.in = append(rp.in, rp.buf[:n]...)
			rp.err = err
			if n == 0 && err == nil {
				continue
			}
		}
		rp.scan()
	}
	n := copy(p, rp.out)
	rp.out = rp.out[n:]
	return n, nil
}

// scan moves what in holds that is decided to out.
func (rp *Replacer) scan() {
	in := rp.in
	var out []byte
	for {
		k, start, at := rp.first(in)
		if k < 0 {
			break
		}
		end := at + len(rp.old[k])
		if rp.err == nil && (rp.longer(in[at:]) || rp.trail != nil && rp.trail[k] && end == len(in)) {
			break // a longer old, or its trailing edge, may follow
		}
		if rp.trail != nil && rp.trail[k] && end < len(in) && isBase64(in[end]) {
			end++
		}
		out = append(out, in[:start]...)
		out = append(out, rp.new[k]...)
		in = in[end:]
	}
	keep := 0
	if rp.err == nil {
		keep = rp.partial(in)
		if rp.lead != nil && keep < len(in) && isBase64(in[len(in)-keep-1]) {
			keep++ // the leading edge of a match to come
		}
		if _, start, _ := rp.first(in); start >= 0 {
			keep = max(keep, len(in)-start) // a longer old may still match there
		}
	}
	out = append(out, in[:len(in)-keep]...)
	rp.in = append(rp.in[:0], in[len(in)-keep:]...)
	rp.out = out
}

// first finds the first match in in: the old k, where its replacement
// starts (its leading edge included) and where the old itself is; k < 0:
// none. Of two starting at one place the longer wins.
func (rp *Replacer) first(in []byte) (k, start, at int) {
	k, start, at = -1, -1, -1
	for i, o := range rp.old {
		if len(o) == 0 {
			continue
		}
		j := bytes.Index(in, o)
		if j < 0 {
			continue
		}
		s := j
		if rp.lead != nil && rp.lead[i] && j > 0 && isBase64(in[j-1]) {
			s--
		}
		if k < 0 || s < start || s == start && j+len(o) > at+len(rp.old[k]) {
			k, start, at = i, s, j
		}
	}
	return k, start, at
}

// longer reports whether rest, which starts with a whole old, could
// still be the start of a longer one.
func (rp *Replacer) longer(rest []byte) bool {
	for _, o := range rp.old {
		if len(o) > len(rest) && bytes.HasPrefix(o, rest) {
			return true
		}
	}
	return false
}

// partial is the length of the longest end of in that starts an old:
// only those bytes wait for more (a stream's event passes at once unless
// it ends like the start of a secret).
func (rp *Replacer) partial(in []byte) int {
	for k := min(len(in), rp.longest-1); k > 0; k-- {
		for _, o := range rp.old {
			if len(o) > k && bytes.HasPrefix(o, in[len(in)-k:]) {
				return k
			}
		}
	}
	return 0
}

// Close closes the underlying reader when it is a Closer.
func (rp *Replacer) Close() error {
	if c, ok := rp.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// isBase64 reports whether c is a character of either base64 alphabet.
func isBase64(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_'
}
