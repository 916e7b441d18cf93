package runtimes

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
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
	huge := make([]byte, 4)
	binary.BigEndian.PutUint32(huge, MaxFrame+1)
	tests := []struct {
		name  string
		input []byte
		max   int
	}{
		{"zero length", frame(""), 0},
		{"over the cap", huge, 0},
		{"over a small cap", frame(`{"type":"done","id":"` + strings.Repeat("x", 100) + `"}`), 64},
		{"truncated header", []byte{0, 0}, 0},
		{"truncated body", frame(`{"type":"done"}`)[:8], 0},
		{"not json", frame(`not json`), 0},
		{"unknown type", frame(`{"type":"execute","code":"x"}`), 0},
		{"bad mime key", frame(`{"type":"display","data":{"text/plain\u0000":"x"}}`), 0},
		{"mime without slash", frame(`{"type":"display","data":{"textplain":"x"}}`), 0},
		{"wrong field type", frame(`{"type":"done","exit_code":"zero"}`), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFrameReader(bytes.NewReader(tc.input), tc.max).Read()
			if err == nil {
				t.Fatal("accepted")
			}
			if errors.Is(err, io.EOF) {
				t.Fatalf("clean EOF for a broken frame: %v", err)
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
	for s, want := range map[string]bool{
		"text/plain": true, "image/png": true, "application/vnd.dataresource+json": true, "text/x-python": true,
		"": false, "text": false, "/plain": false, "text/": false, "a/b/c": false, "text/pl ain": false, "text/plain;charset=utf-8": false,
	} {
		if got := ValidMIME(s); got != want {
			t.Errorf("ValidMIME(%q) = %v, want %v", s, got, want)
		}
	}
}

// FuzzFrameReader feeds arbitrary bytes from a (hostile) runtime: the
// reader must never panic, never return a message of an unknown type, and
// never allocate beyond its cap.
func FuzzFrameReader(f *testing.F) {
	f.Add(frame(`{"type":"hello","language":"python","pid":2}`))
	f.Add(frame(`{"type":"display","id":"e1","data":{"image/png":"iVBOR"},"metadata":{}}`))
	f.Add(frame(`{"type":"error","id":"e1","name":"E","value":"v","traceback":["a"]}`))
	f.Add(append(frame(`{"type":"done","id":"e1","status":"ok"}`), frame(`{"type":"result","data":{"text/plain":"1"}}`)...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 3, '{', '}', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewFrameReader(bytes.NewReader(data), 1<<16)
		for i := 0; i < 64; i++ {
			m, err := r.Read()
			if err != nil {
				return
			}
			switch m.Type {
			case "hello", "configured", "display", "result", "error", "done":
			default:
				t.Fatalf("accepted type %q", m.Type)
			}
			for k := range m.Data {
				if !ValidMIME(k) {
					t.Fatalf("accepted MIME %q", k)
				}
			}
		}
	})
}
