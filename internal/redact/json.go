package redact

import (
	"bytes"
	"encoding/json"
)

// JSON redacts every string of a JSON document, object keys included (a
// rich output's JSON value, its metadata), and says how many matches it
// replaced. Numbers, structure and the document itself are kept when
// nothing matched; a document that does not parse is returned as it is
// (the runtime sent valid JSON, which the server checked).
func (r *Redactor) JSON(doc json.RawMessage) (json.RawMessage, int) {
	if r == nil || len(doc) == 0 {
		return doc, 0
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return doc, 0
	}
	v, n := r.value(v)
	if n == 0 {
		return doc, 0
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return doc, 0
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), n
}

func (r *Redactor) value(v any) (any, int) {
	switch x := v.(type) {
	case string:
		return r.String(x)
	case []any:
		total := 0
		for i, e := range x {
			var n int
			x[i], n = r.value(e)
			total += n
		}
		return x, total
	case map[string]any:
		total := 0
		out := make(map[string]any, len(x))
		for k, e := range x {
			k2, n := r.String(k)
			e2, m := r.value(e)
			out[k2] = e2
			total += n + m
		}
		return out, total
	}
	return v, 0
}
