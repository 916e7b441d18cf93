package secrets

import (
	"bytes"
	"io"
)

// Replacer reads r with every old[i] replaced by new[i], however the
// reads split them: it holds back the bytes that could start a match
// until the match is decided: an end of what was read that starts one.
// At one position the longest old wins.
type Replacer struct {
	r        io.Reader
	old, new [][]byte
	longest  int
	in, out  []byte // read and not scanned; scanned and not returned
	buf      []byte
	err      error
}

// NewReplacer replaces old[i] by new[i] in what r gives.
func NewReplacer(r io.Reader, old, new [][]byte) *Replacer {
	rp := &Replacer{r: r, old: old, new: new, buf: make([]byte, 32<<10)}
	for _, o := range old {
		rp.longest = max(rp.longest, len(o))
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
		at, k := -1, -1
		for i, o := range rp.old {
			if len(o) == 0 {
				continue
			}
			j := bytes.Index(in, o)
			if j >= 0 && (at < 0 || j < at || j == at && len(o) > len(rp.old[k])) {
				at, k = j, i
			}
		}
		if at < 0 || rp.err == nil && rp.longer(in[at:]) {
			break
		}
		out = append(out, in[:at]...)
		out = append(out, rp.new[k]...)
		in = in[at+len(rp.old[k]):]
	}
	keep := 0
	if rp.err == nil {
		keep = rp.partial(in)
	}
	if at := rp.firstMatch(in); at >= 0 && rp.err == nil {
		keep = max(keep, len(in)-at) // a longer old may still match there
	}
	out = append(out, in[:len(in)-keep]...)
	rp.in = append(rp.in[:0], in[len(in)-keep:]...)
	rp.out = out
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

// firstMatch is where the first whole old starts in in (-1: none).
func (rp *Replacer) firstMatch(in []byte) int {
	at := -1
	for _, o := range rp.old {
		if j := bytes.Index(in, o); len(o) > 0 && j >= 0 && (at < 0 || j < at) {
			at = j
		}
	}
	return at
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
