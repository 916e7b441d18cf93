package runtimes

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func frame(body string) []byte {
	b := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(b, uint32(len(body)))
	copy(b[4:], body)
	return b
}

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewFrameWriter(&buf)
	in := Message{Type: "done", ID: "e1", Status: "ok", ExecutionCount: 3}
	if err := w.Write(in); err != nil {
		t.Fatal(err)
	}
	out, err := NewFrameReader(&buf, 0).Read()
	if err != nil {
		t.Fatal(err)
	}
	if out.Type != in.Type || out.ID != in.ID || out.Status != in.Status || out.ExecutionCount != 3 {
		t.Fatalf("got %+v", out)
	}
}

func TestFrameReaderRejects(t *testing.T) {
	huge := binary.BigEndian.AppendUint32(nil, MaxFrame+1)
	tests := []struct {
		name  string
		input []byte
		max   int
		why   string // in the error message
	}{
		// The length checks come before the body is read: the reasons name
		// the length, not bad JSON or a truncated body.
		{"zero length", frame(""), 0, "length 0"},
		{"over the cap", huge, 0, "length 67108865"},
		{"over a small cap", frame(`{"type":"done","id":"` + strings.Repeat("x", 100) + `"}`), 64, "length 123"}, // 123 > 64,
		{"truncated header", []byte{0, 0}, 0, "truncated header"},
		{"truncated body", frame(`{"type":"done"}`)[:8], 0, "truncated body"},
		{"not json", frame(`not json`), 0, "invalid character"},
		{"unknown type", frame(`{"type":"execute","code":"x"}`), 0, `unknown type "execute"`},
		{"bad mime key", frame(`{"type":"display","data":{"text/plain\u0000":"x"}}`), 0, "bad MIME type"},
		{"mime without slash", frame(`{"type":"display","data":{"textplain":"x"}}`), 0, `bad MIME type "textplain"`},
		{"wrong field type", frame(`{"type":"done","exit_code":"zero"}`), 0, "cannot unmarshal"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFrameReader(bytes.NewReader(tc.input), tc.max).Read()
			if !errors.Is(err, ErrFrame) {
				t.Fatalf("got %v, want ErrFrame", err)
			}
			if !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("error %q does not say %q", err, tc.why)
			}
		})
	}
}

func TestFrameReaderCleanEOF(t *testing.T) {
	if _, err := NewFrameReader(bytes.NewReader(nil), 0).Read(); err != io.EOF {
		t.Fatalf("got %v, want io.EOF", err)
	}
}

func TestValidMIME(t *testing.T) {
	long := "application/" + strings.Repeat("x", 116) // 128 bytes, the limit
	for s, want := range map[string]bool{
		"text/plain": true, "image/png": true, "application/vnd.dataresource+json": true, "text/x-python": true, long: true,
		"": false, "text": false, "/plain": false, "text/": false, "a/b/c": false, "text/pl ain": false, "text/plain;charset=utf-8": false, long + "x": false,
	} {
		if got := ValidMIME(s); got != want {
			t.Errorf("ValidMIME(%q) (%d bytes) = %v, want %v", s, len(s), got, want)
		}
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// FuzzFrameReader feeds arbitrary bytes from a (hostile) runtime, with a
// small cap and with the default one (max 0: MaxFrame). The reader must
// never panic; it must return exactly the frames the input holds, in step
// with the framing, each decoded as DecodeMessage does and none longer than
// the cap; a frame whose length is 0 or over the cap must be refused for
// its length; and it must never pull more than one largest frame (4+cap
// bytes) from the input beyond what it has returned.
func FuzzFrameReader(f *testing.F) {
	f.Add(frame(`{"type":"hello","language":"python","pid":2}`))
	f.Add(frame(`{"type":"display","id":"e1","data":{"image/png":"iVBOR"},"metadata":{}}`))
	f.Add(frame(`{"type":"error","id":"e1","name":"E","value":"v","traceback":["a"]}`))
	f.Add(frame(`{"type":"install","id":"e1","manager":"pip","packages":["x==1","y"]}`))
	f.Add(append(frame(`{"type":"done","id":"e1","status":"ok"}`), frame(`{"type":"result","data":{"text/plain":"1"}}`)...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 3, '{', '}', '}'})
	f.Add([]byte{0, 0, 0, 0})
	f.Add(append([]byte{0, 1, 0, 1}, frame(`{"type":"done"}`)...))  // over the small cap only
	f.Add(append(frame(`{"type":"done"}`), make([]byte, 1<<17)...)) // more than 4+cap bytes after a frame
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, max := range []int{1 << 16, 0} {
			limit := max
			if limit == 0 {
				limit = MaxFrame
			}
			cr := &countingReader{r: bytes.NewReader(data)}
			r := NewFrameReader(cr, max)
			off := 0 // where the next frame starts in data
			for i := 0; i < 64; i++ {
				m, err := r.Read()
				if cr.n > off+4+limit {
					t.Fatalf("max %d: read %d bytes of input after returning %d", max, cr.n, off)
				}
				rest := data[off:]
				if len(rest) == 0 {
					if err != io.EOF {
						t.Fatalf("max %d: at the end of input: %v, want io.EOF", max, err)
					}
					break
				}
				if len(rest) < 4 {
					if !errors.Is(err, ErrFrame) {
						t.Fatalf("max %d: %d bytes of header: %v, want ErrFrame", max, len(rest), err)
					}
					break
				}
				n := int(binary.BigEndian.Uint32(rest))
				if n == 0 || n > limit {
					if !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), "length") {
						t.Fatalf("max %d: frame of length %d: got %+v, %v; want a length error", max, n, m, err)
					}
					break
				}
				if len(rest) < 4+n {
					if !errors.Is(err, ErrFrame) {
						t.Fatalf("max %d: truncated frame: got %+v, %v", max, m, err)
					}
					break
				}
				want, werr := DecodeMessage(rest[4 : 4+n])
				if (err == nil) != (werr == nil) || !reflect.DeepEqual(m, want) {
					t.Fatalf("max %d: frame %q: got %+v, %v; DecodeMessage gives %+v, %v", max, rest[4:4+n], m, err, want, werr)
				}
				if err != nil {
					break
				}
				off += 4 + n
			}
		}
	})
}

// An execute carries its code even when it is empty (an empty cell), and
// nothing else grows a "code" field.
func TestExecuteAlwaysCarriesCode(t *testing.T) {
	for _, tc := range []struct {
		m    Message
		want string
	}{
		{Message{Type: "execute", ID: "e1", Code: ""}, `{"type":"execute","id":"e1","code":""}`},
		{Message{Type: "execute", ID: "e2", Code: "x = 1"}, `{"type":"execute","id":"e2","code":"x = 1"}`},
		{Message{Type: "execute", ID: "e3", Code: "a<b", Env: map[string]string{"K": "v"}}, `{"type":"execute","id":"e3","code":"a\u003cb","env":{"K":"v"}}`},
		// More than a session's execute sets is still written.
		{Message{Type: "execute", ID: "e4", Code: "x", Cwd: "/w"}, `{"type":"execute","id":"e4","cwd":"/w","code":"x"}`},
		{Message{Type: "configure", Cwd: "/workspace"}, `{"type":"configure","cwd":"/workspace"}`},
		{Message{Type: "done", ID: "e1", Status: "ok"}, `{"type":"done","id":"e1","status":"ok"}`},
	} {
		var buf bytes.Buffer
		if err := NewFrameWriter(&buf).Write(tc.m); err != nil {
			t.Fatal(err)
		}
		if got := string(buf.Bytes()[4:]); got != tc.want {
			t.Errorf("%s: wrote %s, want %s", tc.m.Type, got, tc.want)
		}
	}
}

// FuzzDecodeDone: whatever decodeDone takes, json.Unmarshal (DecodeMessage's
// way for every other message) reads the same way.
func FuzzDecodeDone(f *testing.F) {
	f.Add([]byte(`{"type":"done","id":"e1","status":"ok","execution_count":1,"exit_code":0}`))
	f.Add([]byte(`{"type":"done","id":"e12","status":"interrupted","execution_count":12,"exit_code":-1}`))
	f.Add([]byte(`{"type":"done","id":"","status":"","execution_count":0,"exit_code":-0}`))
	f.Add([]byte(`{"type":"done","id":"e1","status":"ok","execution_count":01,"exit_code":0}`))
	f.Add([]byte(`{"type":"done","id":"e1","status":"ok","execution_count":1.5,"exit_code":0}`))
	f.Add([]byte(`{"type":"done","id":"e1","status":"ok","execution_count":1,"exit_code":0} `))
	f.Add([]byte(`{"type":"done","id":"e\u0031","status":"ok","execution_count":1,"exit_code":0}`))
	f.Add([]byte(`{"type":"done","id":"e1","status":"ok","execution_count":1234567890,"exit_code":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, ok := decodeDone(b)
		if !ok {
			return
		}
		var want Message
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("decodeDone took %q, json.Unmarshal refuses it: %v", b, err)
		}
		if !reflect.DeepEqual(m, want) {
			t.Fatalf("%q: decodeDone %+v, json.Unmarshal %+v", b, m, want)
		}
	})
}

// TestDecodeDone: the Python runtime's done takes the fast way; other
// forms of it are still read (by json.Unmarshal), and malformed ones
// still refused.
func TestDecodeDone(t *testing.T) {
	want := Message{Type: TypeDone, ID: "e7", Status: "ok", ExecutionCount: 7, ExitCode: 0}
	for _, b := range []string{
		`{"type":"done","id":"e7","status":"ok","execution_count":7,"exit_code":0}`,
		`{"id":"e7","type":"done","status":"ok","execution_count":7,"exit_code":0}`,
		`{"type": "done", "id": "e\u0037", "status": "ok", "execution_count": 7, "exit_code": 0}`,
		`{"type":"done","id":"e7","status":"ok","execution_count":7}`,
	} {
		m, err := DecodeMessage([]byte(b))
		if err != nil || !reflect.DeepEqual(m, want) {
			t.Errorf("%s: %+v, %v", b, m, err)
		}
	}
	if _, ok := decodeDone([]byte(`{"type":"done","id":"e7","status":"ok","execution_count":7,"exit_code":0}`)); !ok {
		t.Error("the Python runtime's done is not taken by decodeDone")
	}
	for _, b := range []string{
		`{"type":"done","id":"e7","status":"ok","execution_count":7,"exit_code":0}}`,
		`{"type":"done","id":"e7","status":"ok","execution_count":99999999999999999999,"exit_code":0}`,
		`{"type":"done","id":"e7","status":"ok","execution_count":07,"exit_code":0}`,
	} {
		if m, err := DecodeMessage([]byte(b)); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: %+v, %v; want ErrFrame", b, m, err)
		}
	}
}

// BenchmarkDecodeDone is what the server reads at the end of every
// Python execution.
func BenchmarkDecodeDone(b *testing.B) {
	frame := []byte(`{"type":"done","id":"e123","status":"ok","execution_count":123,"exit_code":0}`)
	b.ReportAllocs()
	for range b.N {
		if _, err := DecodeMessage(frame); err != nil {
			b.Fatal(err)
		}
	}
}
