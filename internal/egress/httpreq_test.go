package egress

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// run feeds in to a stream for a.test in pieces of size step (0: all at
// once) and returns what it forwarded and its error.
func run(s *reqStream, in string, step int) (string, error) {
	var out bytes.Buffer
	emit := func(b []byte) error { out.Write(b); return nil }
	for p := []byte(in); len(p) > 0; {
		n := len(p)
		if step > 0 {
			n = min(step, n)
		}
		if err := s.feed(p[:n], emit); err != nil {
			return out.String(), err
		}
		p = p[n:]
	}
	return out.String(), nil
}

const (
	getA  = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"
	getB  = "GET / HTTP/1.1\r\nHost: b.test\r\n\r\n"
	postA = "POST /x HTTP/1.1\r\nHost: a.test:8080\r\nContent-Length: 32\r\n\r\n" + getB
)

// Every request on a connection is checked, however the bytes come: in
// one piece, byte by byte, or in odd pieces; bodies (fixed and chunked)
// pass unparsed, even when they look like a request.
func TestRequestStream(t *testing.T) {
	chunked := "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"20;ext=1\r\n" + getB + "\r\n0\r\nX-Sum: 1\r\n\r\n"
	for _, tc := range []struct {
		name, in string
		fwd      string // what passes; "" with err: nothing
		err      string // substring; "" for none
	}{
		{"one request", getA, getA, ""},
		{"keep-alive, both a.test", getA + getA, getA + getA, ""},
		{"second request for another host", getA + getB, getA, `HTTP request 2 on the connection Host "b.test" does not match a.test`},
		{"first request for another host", getB, "", `HTTP Host "b.test" does not match a.test`},
		{"a request in a Content-Length body passes", postA + getA, postA + getA, ""},
		{"after a body, another host", postA + getB, postA, "request 2"},
		{"a request in a chunk passes", chunked + getA, chunked + getA, ""},
		{"after a chunked body, another host", chunked + getB, chunked, "request 2"},
		{"an empty line between requests", getA + "\r\n" + getA, getA + "\r\n" + getA, ""},
		{"absolute URI agreeing", "GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n", "GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n", ""},
		{"absolute URI for another host", getA + "GET http://b.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n", getA, "different hosts"},
		{"absolute URI only", "GET http://A.test./x HTTP/1.0\r\n\r\n", "GET http://A.test./x HTTP/1.0\r\n\r\n", ""},
		{"no Host", "GET / HTTP/1.0\r\n\r\n", "", "without a Host"},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a.test\r\nhost: a.test\r\n\r\n", "", "more than one Host"},
		{"CONNECT", "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test\r\n\r\n", "", "CONNECT"},
		{"both framings", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", "", "both"},
		{"two lengths", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", "", "more than one"},
		{"a length list", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3, 3\r\n\r\n", "", "Content-Length"},
		{"a signed length", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: +3\r\n\r\n", "", "Content-Length"},
		{"a negative zero", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: -0\r\n\r\n", "", "Content-Length"},
		{"gzip coding", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "", "only chunked"},
		{"chunked in 1.0", "POST / HTTP/1.0\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n", "", "only chunked"},
		{"bare LF", "GET / HTTP/1.1\nHost: a.test\n\n", "", "LF without CR"},
		{"bare CR", "GET / HTTP/1.1\rHost: a.test\r\n\r\n", "", "CR without LF"},
		{"folded header", "GET / HTTP/1.1\r\nHost: a.test\r\n X-Y: 1\r\n\r\n", "", "malformed header"},
		{"space before colon", "GET / HTTP/1.1\r\nHost : b.test\r\n\r\n", "", "malformed header"},
		{"control character", "GET / HTTP/1.1\r\nHost: a.test\r\nX: a\x00b\r\n\r\n", "", "control character"},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "", "malformed request line"},
		{"double space", "GET  / HTTP/1.1\r\nHost: a.test\r\n\r\n", "", "malformed request line"},
		{"chunk size with a space", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n", "chunk size"},
		{"chunk size overflow", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n", "chunk size"},
		{"chunk too long", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab", "not followed by CRLF"},
		{"upgrade to h2c", "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", "", "only websocket"},
		{"upgrade after the first request", getA + "GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n\r\n", getA, "first request"},
		{"head too large", "GET / HTTP/1.1\r\nHost: a.test\r\nX: " + strings.Repeat("x", maxPeek), "", "larger than"},
	} {
		for _, step := range []int{0, 1, 7} {
			fwd, err := run(newReqStream("a.test"), tc.in, step)
			if fwd != tc.fwd || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("%s (pieces of %d): forwarded %q, %v; want %q, %q", tc.name, step, fwd, err, tc.fwd, tc.err)
			}
		}
	}
}

// An Upgrade holds the client's next bytes until the upstream answers:
// 101 makes the rest opaque, anything else HTTP again (a declined
// upgrade must not open the connection to any Host).
func TestRequestStreamUpgrade(t *testing.T) {
	ws := "GET /chat HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
	for _, switched := range []bool{true, false} {
		s := newReqStream("a.test")
		fwd, err := run(s, ws+getB, 5)
		if err != nil || fwd != ws || !s.waiting() {
			t.Fatalf("before the answer: forwarded %q, %v, waiting %v", fwd, err, s.waiting())
		}
		var out bytes.Buffer
		err = s.answered(switched, func(b []byte) error { out.Write(b); return nil })
		if switched && (err != nil || out.String() != getB) {
			t.Errorf("after 101: forwarded %q, %v; want the held bytes", out.String(), err)
		}
		if !switched && (err == nil || out.Len() != 0 || !strings.Contains(err.Error(), `Host "b.test"`)) {
			t.Errorf("after a declined upgrade: forwarded %q, %v; want a refusal", out.String(), err)
		}
	}
	if _, err := run(newReqStream("a.test"), "GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\nhi", 0); err == nil {
		t.Error("an Upgrade with a body was accepted")
	}
}

// The forward proxy's stream passes exactly the body of the request it
// rewrote, then nothing.
func TestBodyStream(t *testing.T) {
	for _, tc := range []struct {
		length  int64
		chunked bool
		in, fwd string
	}{
		{-1, false, getB, ""},
		{0, false, getB, ""},
		{5, false, "hello" + getB, "hello"},
		{-1, true, "5\r\nhello\r\n0\r\n\r\n" + getB, "5\r\nhello\r\n0\r\n\r\n"},
	} {
		fwd, err := run(bodyStream("a.test", tc.length, tc.chunked), tc.in, 3)
		if fwd != tc.fwd || err != errOneRequest {
			t.Errorf("body %d/%v: forwarded %q, %v; want %q and the end", tc.length, tc.chunked, fwd, err, tc.fwd)
		}
	}
}

// FuzzRequestStream checks what the stream lets through against
// net/http's parser, as an upstream server would read it: every request
// in the forwarded bytes is for a.test, and the stream decides the same
// however the bytes are cut into pieces.
func FuzzRequestStream(f *testing.F) {
	for _, s := range []string{getA, getA + getB, postA + getA,
		"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n3;x\r\nabc\r\n0\r\nT: 1\r\n\r\n" + getB,
		"GET http://a.test/ HTTP/1.1\r\nHost: a.test:80\r\n\r\n",
		"POST / HTTP/1.0\r\nHost: a.test\r\nContent-Length: 4\r\n\r\nabcd" + getA} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		whole, err := run(newReqStream("a.test"), string(data), 0)
		for _, step := range []int{1, 5} {
			w, e := run(newReqStream("a.test"), string(data), step)
			if w != whole || (e == nil) != (err == nil) {
				t.Fatalf("pieces of %d: %q, %v; at once: %q, %v", step, w, e, whole, err)
			}
		}
		if !strings.HasPrefix(string(data), whole) {
			t.Fatalf("forwarded %q, not a prefix of the input", whole)
		}
		br := bufio.NewReader(strings.NewReader(whole))
		for {
			for {
				if b, err := br.Peek(2); err != nil || string(b) != "\r\n" {
					break
				}
				br.Discard(2)
			}
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if n, err := NormalizeName(stripPort(req.Host)); err != nil || n != "a.test" {
				t.Fatalf("forwarded a request for %q: %q", req.Host, whole)
			}
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				return
			}
		}
	})
}
