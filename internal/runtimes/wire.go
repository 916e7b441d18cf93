package runtimes

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sync"
)

// The framing of docs/runtime-protocol.md: a 4-byte big-endian length and
// that many bytes of JSON. Everything read here comes from the sandbox and
// is treated as untrusted input: sizes are capped, and a malformed frame
// ends the session instead of being guessed at.

// MaxFrame is the largest frame accepted from a runtime.
const MaxFrame = 64 << 20

// ErrFrame is returned for a malformed frame.
var ErrFrame = errors.New("malformed frame from the runtime")

// The types of messages a runtime sends. Hello and configured answer the
// connection (package instance); the others belong to the execution
// under way, and package session has a handler for each, in one table
// (a new type here is a new handler there).
const (
	TypeHello      = "hello"
	TypeConfigured = "configured"
	TypeDisplay    = "display"
	TypeResult     = "result"
	TypeError      = "error"
	TypeDone       = "done"
	// TypeInstall is a request (a cell's %pip install): the server
	// answers "installed".
	TypeInstall = "install"
)

// ExecutionTypes are the types of an execution's messages.
var ExecutionTypes = []string{TypeDisplay, TypeResult, TypeError, TypeInstall, TypeDone}

// Message is one message in either direction. Only the fields of its Type
// are set.
type Message struct {
	Type string `json:"type"`
	ID   string `json:"id,omitempty"`

	// execute (always sent, see MarshalJSON)
	Code string `json:"code,omitempty"`
	// configure, run
	Env map[string]string `json:"env,omitempty"`
	Cwd string            `json:"cwd,omitempty"`
	// configure: variables set where the environment has none, the rest
	// kept (a network given to a session later: its proxy settings)
	Defaults map[string]string `json:"defaults,omitempty"`
	// configure: reseed the interpreter's random generators from the
	// kernel (a restored fork shares its source's memory)
	Reseed bool `json:"reseed,omitempty"`
	// configured: the generators were reseeded (a runtime older than
	// the reseed ignores it and does not say so)
	Reseeded bool `json:"reseeded,omitempty"`
	// run: the interpreter, the program file and its arguments
	Argv  []string `json:"argv,omitempty"`
	Fresh bool     `json:"fresh,omitempty"`

	// hello
	Language string `json:"language,omitempty"`
	Version  string `json:"version,omitempty"`
	Pid      int    `json:"pid,omitempty"`

	// display, result
	Data     map[string]json.RawMessage `json:"data,omitempty"`
	Metadata json.RawMessage            `json:"metadata,omitempty"`

	// error
	Name      string   `json:"name,omitempty"`
	Value     string   `json:"value,omitempty"`
	Traceback []string `json:"traceback,omitempty"`

	// install (runtime to server: a %pip install in a cell) and its
	// installed reply (Error empty on success, Wheels where the files are)
	Manager  string   `json:"manager,omitempty"`
	Packages []string `json:"packages,omitempty"`
	Wheels   string   `json:"wheels,omitempty"`
	Log      string   `json:"log,omitempty"`

	// done
	Status         string `json:"status,omitempty"`
	ExecutionCount int    `json:"execution_count,omitempty"`
	ExitCode       int    `json:"exit_code,omitempty"`

	// configured: what could not be set (a variable, the directory);
	// installed: why the install failed
	Error string `json:"error,omitempty"`
}

// MarshalJSON writes only the fields that are set, except that an
// execute always carries its code: an empty cell is a cell, and a runtime
// must not have to guess what a missing "code" means.
func (m Message) MarshalJSON() ([]byte, error) {
	type fields Message // without this method
	if m.Type != "execute" {
		return json.Marshal(fields(m))
	}
	if m.isZeroBut() {
		// What a session sends per execution, encoded without walking
		// every field of Message (a fifth of the time).
		return json.Marshal(executeFrame{m.Type, m.ID, m.Code, m.Env})
	}
	return json.Marshal(struct {
		fields
		Code string `json:"code"` // shadows the embedded omitempty one
	}{fields(m), m.Code})
}

// executeFrame is an execute that sets nothing else.
type executeFrame struct {
	Type string            `json:"type"`
	ID   string            `json:"id,omitempty"`
	Code string            `json:"code"`
	Env  map[string]string `json:"env,omitempty"`
}

// isZeroBut reports whether m sets no field but executeFrame's.
func (m Message) isZeroBut() bool {
	m.Type, m.ID, m.Code, m.Env = "", "", "", nil
	return reflect.ValueOf(m).IsZero()
}

// FrameWriter writes frames; it is safe for concurrent use.
type FrameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewFrameWriter writes frames to w.
func NewFrameWriter(w io.Writer) *FrameWriter { return &FrameWriter{w: w} }

// Write sends one message.
func (fw *FrameWriter) Write(m Message) error {
	// Not json.Marshal(m): it would scan MarshalJSON's answer again.
	b, err := m.MarshalJSON()
	if err != nil {
		return err
	}
	if len(b) > MaxFrame {
		return fmt.Errorf("frame of %d bytes is too large", len(b))
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	fw.mu.Lock()
	defer fw.mu.Unlock()
	_, err = fw.w.Write(buf)
	return err
}

// FrameReader reads frames from an untrusted runtime.
type FrameReader struct {
	r   *bufio.Reader
	max int
}

// NewFrameReader reads frames of at most max bytes (MaxFrame if 0).
func NewFrameReader(r io.Reader, max int) *FrameReader {
	if max <= 0 || max > MaxFrame {
		max = MaxFrame
	}
	return &FrameReader{r: bufio.NewReaderSize(r, 8<<10), max: max}
}

// Read returns the next message. io.EOF means the runtime closed the
// socket between frames; anything else is ErrFrame or a read error.
func (fr *FrameReader) Read() (Message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Message{}, fmt.Errorf("%w: truncated header", ErrFrame)
		}
		return Message{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || int64(n) > int64(fr.max) {
		return Message{}, fmt.Errorf("%w: length %d", ErrFrame, n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(fr.r, buf); err != nil {
		return Message{}, fmt.Errorf("%w: truncated body: %v", ErrFrame, err)
	}
	return DecodeMessage(buf)
}

// DecodeMessage parses one frame body.
func DecodeMessage(b []byte) (Message, error) {
	if m, ok := decodeDone(b); ok {
		return m, nil
	}
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrFrame, err)
	}
	if m.Type != TypeHello && m.Type != TypeConfigured && !slices.Contains(ExecutionTypes, m.Type) {
		return Message{}, fmt.Errorf("%w: unknown type %q", ErrFrame, truncate(m.Type, 32))
	}
	for k := range m.Data {
		if !ValidMIME(k) {
			return Message{}, fmt.Errorf("%w: bad MIME type %q", ErrFrame, truncate(k, 64))
		}
	}
	return m, nil
}

// ValidMIME accepts type/subtype with the characters MIME allows.
func ValidMIME(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	slash := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '/':
			slash++
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.' || c == '+' || c == '-' || c == '_':
		default:
			return false
		}
	}
	return slash == 1 && s[0] != '/' && s[len(s)-1] != '/'
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// decodeDone parses the done message every execution ends with, in the
// one form the Python runtime writes it (wire.encode_done), without
// encoding/json: {"type":"done","id":ID,"status":STATUS,
// "execution_count":N,"exit_code":N} exactly, no space, ID of letters,
// digits, '-', '_' and '.', STATUS of lower-case letters, each N an
// integer of at most 9 digits. Anything else (another order, an escape, a
// field more) is not taken here, and json.Unmarshal reads it as ever: ok
// reports that m is what json.Unmarshal makes of b (FuzzDecodeDone).
func decodeDone(b []byte) (m Message, ok bool) {
	rest, ok := bytes.CutPrefix(b, []byte(`{"type":"done","id":"`))
	if !ok {
		return Message{}, false
	}
	var id, status []byte
	var count, code int
	if id, rest, ok = cutToken(rest, idByte); !ok {
		return Message{}, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`","status":"`)); !ok {
		return Message{}, false
	}
	if status, rest, ok = cutToken(rest, func(c byte) bool { return c >= 'a' && c <= 'z' }); !ok {
		return Message{}, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`","execution_count":`)); !ok {
		return Message{}, false
	}
	if count, rest, ok = cutInt(rest); !ok {
		return Message{}, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"exit_code":`)); !ok {
		return Message{}, false
	}
	if code, rest, ok = cutInt(rest); !ok || string(rest) != "}" {
		return Message{}, false
	}
	return Message{Type: TypeDone, ID: string(id), Status: string(status), ExecutionCount: count, ExitCode: code}, true
}

// idByte is a byte an execution id may hold in decodeDone's form (the
// server's ids are e1, e2, ...).
func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// cutToken cuts the bytes b starts with that are all in, up to the
// first that is not, which must exist.
func cutToken(b []byte, in func(byte) bool) (tok, rest []byte, ok bool) {
	for i, c := range b {
		if !in(c) {
			return b[:i], b[i:], true
		}
	}
	return nil, nil, false
}

// cutInt cuts a JSON integer of at most 9 digits (no leading zero, no
// fraction or exponent) from the start of b.
func cutInt(b []byte) (n int, rest []byte, ok bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		n = n*10 + int(b[i]-'0')
		i++
	}
	if i == 0 || i > 9 || (b[0] == '0' && i > 1) || (i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E')) {
		return 0, nil, false
	}
	if neg {
		n = -n
	}
	return n, b[i:], true
}
