package docgen

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
)

// HTTPAPI renders docs/reference/http-api.md from the OpenAPI document
// at path: its description and every operation, in the document's order.
func HTTPAPI(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var doc struct {
		Info struct {
			Description string `json:"description"`
		} `json:"info"`
		Paths orderedPaths `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return "", fmt.Errorf("%s: %v", path, err)
	}
	var b strings.Builder
	b.WriteString(header("HTTP API", "internal/httpapi/v1/openapi.json"))
	b.WriteString("The OpenAPI 3 document is [`internal/httpapi/v1/openapi.json`](../../internal/httpapi/v1/openapi.json),\n" +
		"also served by every server at `GET /v1/openapi.json`; its schemas are the full reference\n" +
		"of every request and answer. The [sessions guide](../guides/sessions-api.md) shows them in use.\n\n")
	b.WriteString(strings.TrimSpace(doc.Info.Description) + "\n\n## Operations\n\n| method and path | what |\n| --- | --- |\n")
	for _, op := range doc.Paths {
		fmt.Fprintf(&b, "| [`%s %s`](#%s) | %s |\n", op.method, op.path, anchor(op.method+" "+op.path), cell(op.Summary))
	}
	for _, op := range doc.Paths {
		fmt.Fprintf(&b, "\n### %s %s\n\n**%s.** %s\n", op.method, op.path, op.Summary, strings.TrimSpace(op.Description))
	}
	return b.String(), nil
}

type operation struct {
	method, path         string
	Summary, Description string
}

// orderedPaths keeps the document's order of paths and methods.
type orderedPaths []operation

func (o *orderedPaths) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if _, err := dec.Token(); err != nil {
		return err
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		var methods json.RawMessage
		if err := dec.Decode(&methods); err != nil {
			return err
		}
		mdec := json.NewDecoder(strings.NewReader(string(methods)))
		mdec.Token()
		for mdec.More() {
			mt, err := mdec.Token()
			if err != nil {
				return err
			}
			var raw json.RawMessage
			if err := mdec.Decode(&raw); err != nil {
				return err
			}
			m := mt.(string)
			if !slices.Contains([]string{"get", "put", "post", "delete", "patch", "head"}, m) {
				continue // the path's parameters
			}
			var op operation
			if err := json.Unmarshal(raw, &op); err != nil {
				return err
			}
			op.method, op.path = strings.ToUpper(m), t.(string)
			*o = append(*o, op)
		}
	}
	return nil
}
