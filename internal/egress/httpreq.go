package egress

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// reqStream follows the requests a client sends on one plain HTTP/1
// connection as its bytes pass, so that every request names the host
// behind the connection's address — not only the first of a keep-alive
// connection: later ones, pipelined or not, could otherwise name any host
// an allowed name's server (a CDN) routes to. It holds at most one request
// head (maxPeek), a chunk-size line or a trailer section, and passes
// bodies through as they come, never buffering them.
//
// It is strict where HTTP parsers are known to differ (request
// smuggling): a message another parser could frame differently — bare CR
// or LF, folded or space-padded header names, Content-Length together with
// Transfer-Encoding, more than one of either, a coding other than chunked,
// a malformed chunk — is refused, not guessed at, so that the upstream
// cannot see a request boundary the gate did not check.
type reqStream struct {
	name     string // the name every request must name
	single   bool   // the forward proxy's: one request, nothing after it
	isHead   bool   // single: the request is HEAD (its answer has no body)
	state    reqState
	buf      []byte // the head, chunk-size line or trailers being collected
	left     int64  // body or chunk bytes still to pass
	requests int    // heads checked
	pending  []byte // bytes held while an upgrade waits for its answer
	read     []byte // peek's: every byte it read from the client
}

type reqState int

const (
	stHead      reqState = iota // collecting a request head
	stBody                      // passing left bytes of a Content-Length body
	stChunkSize                 // collecting a chunk-size line
	stChunkData                 // passing left bytes of chunk data
	stChunkEnd                  // the CRLF after chunk data
	stTrailer                   // collecting the trailer section
	stUpgrade                   // an Upgrade request waits for its answer
	stOpaque                    // protocols switched (101): everything passes
	stDone                      // single: the request is over
)

// refusedError is a request refused on a connection already carried:
// the connection is cut.
type refusedError struct{ error }

// statusCode is the status of a response head ("HTTP/1.1 101 ..."), or 0.
func statusCode(head []byte) int {
	line, _, _ := bytes.Cut(head, []byte("\r\n"))
	proto, rest, _ := bytes.Cut(line, []byte(" "))
	if !bytes.HasPrefix(proto, []byte("HTTP/1.")) || len(rest) < 3 || (len(rest) > 3 && rest[3] != ' ') {
		return 0
	}
	n, err := strconv.Atoi(string(rest[:3]))
	if err != nil {
		return 0
	}
	return n
}

// responseFraming reads a response head's status and body framing:
// Content-Length (-1: none) or chunked; ok is false when the framing is
// not one the proxy can follow (then the body ends when the upstream
// closes).
func responseFraming(head []byte) (code int, length int64, chunked, ok bool) {
	code, length, ok = statusCode(head), -1, true
	lines := strings.Split(string(head[:len(head)-4]), "\r\n")
	for _, line := range lines[1:] {
		name, value, _ := strings.Cut(line, ":")
		value = strings.Trim(value, " \t")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "content-length":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil || n < 0 || (length >= 0 && n != length) {
				ok = false
			}
			length = n
		case "transfer-encoding":
			if chunked || !strings.EqualFold(value, "chunked") {
				ok = false
			}
			chunked = true
		}
	}
	if chunked {
		length = -1
	}
	return code, length, chunked, ok && code != 0
}

// errOneRequest ends the forward proxy's client side after its request:
// nothing the client sends afterwards is forwarded.
var errOneRequest = errors.New("one request per proxy connection")

// maxChunkLine bounds a chunk-size line with its extensions.
const maxChunkLine = 4 << 10

func newReqStream(name string) *reqStream { return &reqStream{name: name} }

// bodyStream follows only the body of a request whose head the forward
// proxy read and rewrote itself (chunked, or length bytes; -1: none):
// after it, nothing more passes.
func bodyStream(name string, length int64, chunked bool) *reqStream {
	s := &reqStream{name: name, single: true, requests: 1}
	s.start(length, chunked)
	return s
}

// start sets up a body: chunked, or length bytes (-1 or 0: none).
func (s *reqStream) start(length int64, chunked bool) {
	switch {
	case chunked:
		s.state = stChunkSize
	case length > 0:
		s.state, s.left = stBody, length
	default:
		s.endRequest()
	}
}

// feed takes p, the next bytes from the client, and calls out with every
// piece that may be forwarded, in order (out must not keep the slice). An
// error means the connection must be cut: nothing after what out was
// given may reach the upstream.
func (s *reqStream) feed(p []byte, out func([]byte) error) error {
	for len(p) > 0 {
		switch s.state {
		case stBody, stChunkData:
			n := int(min(int64(len(p)), s.left))
			if err := out(p[:n]); err != nil {
				return err
			}
			p = p[n:]
			s.skipped(int64(n))
		case stUpgrade:
			if len(s.pending)+len(p) > maxPeek {
				return errors.New("more than 16 KiB sent before the answer to an Upgrade request")
			}
			s.pending = append(s.pending, p...)
			return nil
		case stOpaque:
			return out(p)
		case stDone:
			return errOneRequest
		default:
			k, done, err := s.collect(p)
			p = p[k:]
			if err != nil {
				return err
			}
			if !done {
				continue
			}
			if err := s.complete(); err != nil {
				return err
			}
			if err := out(s.buf); err != nil {
				return err
			}
			s.buf = s.buf[:0]
		}
	}
	return nil
}

// bodyLeft is how many of the next bytes are body (or chunk data) that
// may pass unseen: the caller may move them itself (splice), then report
// them with skipped.
func (s *reqStream) bodyLeft() int64 {
	if s.state == stBody || s.state == stChunkData {
		return s.left
	}
	return 0
}

// skipped accounts n body bytes passed (n ≤ bodyLeft).
func (s *reqStream) skipped(n int64) {
	s.left -= n
	if s.left > 0 {
		return
	}
	if s.state == stChunkData {
		s.state = stChunkEnd
	} else {
		s.endRequest()
	}
}

func (s *reqStream) endRequest() {
	if s.single {
		s.state = stDone
	} else {
		s.state = stHead
	}
}

// waiting reports whether the stream waits for the answer to an Upgrade
// request; the caller reads no more from the client until answered.
func (s *reqStream) waiting() bool { return s.state == stUpgrade }

// answered resumes after the upstream's answer to an Upgrade request: 101
// switched protocols (everything passes from then on), anything else kept
// HTTP (the next bytes are a request again). The bytes held meanwhile are
// fed.
func (s *reqStream) answered(switched bool, out func([]byte) error) error {
	if s.state != stUpgrade {
		return nil
	}
	s.state = stHead
	if switched {
		s.state = stOpaque
	}
	p := s.pending
	s.pending = nil
	return s.feed(p, out)
}

// collect appends bytes of p to buf until the current element is whole
// (a head ends with an empty line, a chunk-size line or the CRLF after
// chunk data with CRLF, trailers with an empty line). It returns how many
// bytes it took. Every line must end with CRLF: a bare CR or LF is an
// error, not a line end some upstream might see elsewhere.
func (s *reqStream) collect(p []byte) (int, bool, error) {
	limit := maxPeek
	switch s.state {
	case stChunkSize:
		limit = maxChunkLine
	case stChunkEnd:
		limit = 2
	}
	for i, b := range p {
		var prev byte
		if len(s.buf) > 0 {
			prev = s.buf[len(s.buf)-1]
		}
		if prev == '\r' && b != '\n' {
			return i, false, errors.New("malformed HTTP request: CR without LF")
		}
		if b == '\n' && prev != '\r' {
			return i, false, errors.New("malformed HTTP request: LF without CR")
		}
		if len(s.buf) >= limit {
			return i, false, s.tooLarge()
		}
		s.buf = append(s.buf, b)
		if b != '\n' {
			continue
		}
		var done bool
		switch s.state {
		case stHead, stTrailer:
			// An empty line alone before a request is tolerated (RFC
			// 9112 2.2), as it ends an empty trailer section.
			done = len(s.buf) == 2 || bytes.HasSuffix(s.buf, []byte("\r\n\r\n"))
		default:
			done = true
		}
		if done {
			return i + 1, true, nil
		}
	}
	return len(p), false, nil
}

func (s *reqStream) tooLarge() error {
	switch s.state {
	case stChunkSize:
		return fmt.Errorf("HTTP chunk-size line larger than %d bytes", maxChunkLine)
	case stChunkEnd:
		return errors.New("malformed HTTP chunked body: chunk data not followed by CRLF")
	case stTrailer:
		return fmt.Errorf("HTTP trailers larger than %d bytes", maxPeek)
	}
	return fmt.Errorf("HTTP request head larger than %d bytes", maxPeek)
}

// complete checks the element collected in buf and moves to the next
// state.
func (s *reqStream) complete() error {
	switch s.state {
	case stHead:
		if len(s.buf) == 2 {
			return nil // an empty line between requests
		}
		return s.head()
	case stChunkSize:
		n, err := chunkSize(s.buf[:len(s.buf)-2])
		if err != nil {
			return err
		}
		if n == 0 {
			s.state = stTrailer
		} else {
			s.state, s.left = stChunkData, n
		}
	case stChunkEnd:
		if string(s.buf) != "\r\n" {
			return errors.New("malformed HTTP chunked body: chunk data not followed by CRLF")
		}
		s.state = stChunkSize
	case stTrailer:
		if len(s.buf) > 2 {
			for _, line := range strings.Split(string(s.buf[:len(s.buf)-4]), "\r\n") {
				if _, _, err := fieldLine(line); err != nil {
					return fmt.Errorf("malformed HTTP trailer: %v", err)
				}
			}
		}
		s.endRequest()
	}
	return nil
}

// head checks a whole request head and sets up its body.
func (s *reqStream) head() error {
	h, err := parseHead(s.buf)
	s.requests++
	what := "HTTP"
	if s.requests > 1 {
		what = fmt.Sprintf("HTTP request %d on the connection", s.requests)
	}
	if err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	if n, err := NormalizeName(h.host); err != nil || n != s.name {
		return fmt.Errorf("%s Host %q does not match %s, the name behind the address", what, clip(h.host), s.name)
	}
	switch {
	case h.upgrade && s.requests > 1:
		return fmt.Errorf("%s: an Upgrade must be the first request on its connection", what)
	case h.upgrade:
		s.state = stUpgrade
	default:
		s.start(h.length, h.chunked)
	}
	return nil
}

// reqHead is what the gate needs of a request head.
type reqHead struct {
	host    string // without a port
	length  int64  // Content-Length; -1: none
	chunked bool
	upgrade bool // Upgrade: websocket
}

// parseHead parses a whole request head (ending with an empty line),
// strictly: see reqStream.
func parseHead(head []byte) (reqHead, error) {
	h := reqHead{length: -1}
	lines := strings.Split(string(head[:len(head)-4]), "\r\n")
	method, rest, _ := strings.Cut(lines[0], " ")
	target, proto, ok := strings.Cut(rest, " ")
	if !ok || !isToken(method) || target == "" || strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r == 0x7f }) ||
		(proto != "HTTP/1.1" && proto != "HTTP/1.0") {
		return h, errors.New("malformed request line")
	}
	if method == "CONNECT" {
		return h, errors.New("CONNECT on a direct connection")
	}
	var hosts, lengths, codings, upgrades []string
	for _, line := range lines[1:] {
		name, value, err := fieldLine(line)
		if err != nil {
			return h, err
		}
		switch strings.ToLower(name) {
		case "host":
			hosts = append(hosts, value)
		case "content-length":
			lengths = append(lengths, value)
		case "transfer-encoding":
			codings = append(codings, value)
		case "upgrade":
			upgrades = append(upgrades, value)
		}
	}
	var uri string
	if !strings.HasPrefix(target, "/") && target != "*" {
		u, err := url.Parse(target)
		if err != nil || u.Host == "" || (!strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https")) {
			return h, errors.New("malformed request target")
		}
		uri = u.Host
	}
	switch {
	case len(hosts) > 1:
		return h, errors.New("more than one Host")
	case len(hosts) == 0 && uri == "":
		return h, errors.New("request without a Host")
	case len(hosts) == 1 && uri != "" && !strings.EqualFold(stripPort(hosts[0]), stripPort(uri)):
		return h, errors.New("Host and request URI name different hosts")
	case len(hosts) == 1:
		h.host = stripPort(hosts[0])
	default:
		h.host = stripPort(uri)
	}
	switch {
	case len(lengths) > 1 || len(codings) > 1:
		return h, errors.New("more than one Content-Length or Transfer-Encoding")
	case len(lengths) == 1 && len(codings) == 1:
		return h, errors.New("both Content-Length and Transfer-Encoding")
	case len(codings) == 1 && (!strings.EqualFold(codings[0], "chunked") || proto == "HTTP/1.0"):
		return h, fmt.Errorf("Transfer-Encoding %q (only chunked, in HTTP/1.1, is carried)", clip(codings[0]))
	case len(codings) == 1:
		h.chunked = true
	case len(lengths) == 1:
		n, err := strconv.ParseInt(lengths[0], 10, 64)
		if err != nil || len(lengths[0]) > 18 || strings.ContainsFunc(lengths[0], func(r rune) bool { return r < '0' || r > '9' }) {
			return h, fmt.Errorf("bad Content-Length %q", clip(lengths[0]))
		}
		h.length = n
	}
	switch {
	case len(upgrades) > 1:
		return h, errors.New("more than one Upgrade")
	case len(upgrades) == 1 && !strings.EqualFold(upgrades[0], "websocket"):
		return h, fmt.Errorf("Upgrade to %q (only websocket is carried)", clip(upgrades[0]))
	case len(upgrades) == 1 && (h.chunked || h.length > 0):
		return h, errors.New("an Upgrade request with a body")
	case len(upgrades) == 1:
		h.upgrade = true
	}
	return h, nil
}

// fieldLine splits a header (or trailer) line: a token, a colon right
// after it, and a value without control characters but tab, without its
// surrounding spaces. Folded lines are refused.
func fieldLine(line string) (name, value string, err error) {
	name, value, ok := strings.Cut(line, ":")
	if !ok || !isToken(name) {
		return "", "", fmt.Errorf("malformed header line %q", clip(line))
	}
	value = strings.Trim(value, " \t")
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return "", "", fmt.Errorf("control character in header %q", clip(name))
		}
	}
	return name, value, nil
}

// chunkSize parses a chunk-size line without its CRLF: hex digits, then
// nothing or extensions after ";".
func chunkSize(line []byte) (int64, error) {
	size, ext, _ := bytes.Cut(line, []byte(";"))
	if len(size) == 0 || len(size) > 15 {
		return 0, fmt.Errorf("malformed HTTP chunk size %q", clip(string(line)))
	}
	n, err := strconv.ParseUint(string(size), 16, 64)
	if err != nil || bytes.ContainsAny(size, "+-_xX") {
		return 0, fmt.Errorf("malformed HTTP chunk size %q", clip(string(line)))
	}
	for _, c := range ext {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return 0, errors.New("control character in an HTTP chunk extension")
		}
	}
	return int64(n), nil
}

// isToken reports whether s is an HTTP token (RFC 9110 5.6.2).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func stripPort(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

// looksHTTP reports whether data can start an HTTP/1 request line: a
// method token, then a space (or not there yet).
func looksHTTP(data []byte) bool {
	for i, c := range data {
		if c == ' ' {
			return i > 0
		}
		if !isTchar(c) || i >= 32 {
			return false
		}
	}
	return true
}
