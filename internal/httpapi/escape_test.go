package httpapi

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode"
)

// No control character reaches a response raw: encoding/json escapes C0,
// escapeControls DEL and C1; the JSON still decodes to the same strings.
func TestEscapeControls(t *testing.T) {
	for r := rune(0); r < 0x100; r++ {
		s := "a" + string(r) + "é\u009b" + string(r)
		enc, _ := json.Marshal(map[string]string{"path": s})
		out := EscapeControls(enc)
		for _, c := range string(out) {
			if unicode.IsControl(c) {
				t.Fatalf("%U: %q holds %U raw", r, out, c)
			}
		}
		var back map[string]string
		if err := json.Unmarshal(out, &back); err != nil || back["path"] != s {
			t.Fatalf("%U: %q decodes to %q, %v", r, out, back["path"], err)
		}
	}
	plain := []byte(`{"a":"é ✓"}`)
	if out := EscapeControls(plain); !bytes.Equal(out, plain) || &out[0] != &plain[0] {
		t.Errorf("a response without them is rewritten: %q", out)
	}
}
