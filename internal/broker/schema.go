package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"airlock/internal/errdefs"
)

// argSchema is a tool's arguments' JSON Schema, compiled.
type argSchema struct {
	raw      json.RawMessage // as declared, for listings
	root     *jsonschema.Schema
	resolved *jsonschema.Resolved
	// props: the declared arguments, in the order of the declaration's
	// keys when it has one (sorted otherwise).
	props []string
}

// scalarTypes are the types an argument a template writes may have.
var scalarTypes = []string{"string", "integer", "number", "boolean"}

// compileSchema compiles a tool's argument schema: an object schema,
// closed (additionalProperties false unless it says otherwise), with no
// keyword the validator does not know (a misspelt maxLength must not
// leave a value unbounded), no remote reference, and every argument a
// template writes a scalar, a string one bounded (maxLength, enum or
// const).
func compileSchema(raw json.RawMessage, templated []string) (*argSchema, error) {
	var s jsonschema.Schema
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("not a JSON Schema: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the schema")
	}
	if s.Type != "object" {
		return nil, errors.New(`the schema must be an object's ("type": "object")`)
	}
	if err := checkKeywords(&s, "arguments"); err != nil {
		return nil, err
	}
	if s.AdditionalProperties == nil {
		s.AdditionalProperties = &jsonschema.Schema{Not: &jsonschema.Schema{}}
	}
	for _, name := range templated {
		p, ok := s.Properties[name]
		if !ok {
			return nil, fmt.Errorf("the template names {%s}, which the schema's properties do not declare", name)
		}
		if !slices.Contains(scalarTypes, p.Type) {
			return nil, fmt.Errorf("property %s: a template writes it, so its type must be one of %s", name, strings.Join(scalarTypes, ", "))
		}
		if p.Type == "string" && p.MaxLength == nil && p.Enum == nil && p.Const == nil {
			return nil, fmt.Errorf("property %s: a template writes it, so it needs maxLength (or enum, or const)", name)
		}
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, err
	}
	props := propertyOrder(raw)
	if len(props) != len(s.Properties) {
		props = sortedKeys(s.Properties)
	}
	return &argSchema{raw: raw, root: &s, resolved: rs, props: props}, nil
}

// propertyOrder is the order the schema declares its properties in (the
// order refusals list them in); nil if it cannot tell.
func propertyOrder(raw json.RawMessage) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(top["properties"]))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var out []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil
		}
		out = append(out, k.(string))
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return nil
		}
	}
	return out
}

// checkKeywords refuses keywords the validator would ignore, anywhere in
// s.
func checkKeywords(s *jsonschema.Schema, where string) error {
	if s == nil {
		return nil
	}
	if len(s.Extra) > 0 {
		return fmt.Errorf("%s: unknown keyword %q (a misspelling would leave a value unchecked)", where, sortedKeys(s.Extra)[0])
	}
	if s.Ref != "" && !strings.HasPrefix(s.Ref, "#") || s.DynamicRef != "" {
		return fmt.Errorf("%s: only references within the schema (#/...) are allowed", where)
	}
	for name, p := range s.Properties {
		if err := checkKeywords(p, where+"."+name); err != nil {
			return err
		}
	}
	for name, d := range s.Defs {
		if err := checkKeywords(d, where+".$defs."+name); err != nil {
			return err
		}
	}
	for name, d := range s.Definitions {
		if err := checkKeywords(d, where+".definitions."+name); err != nil {
			return err
		}
	}
	for name, p := range s.PatternProperties {
		if err := checkKeywords(p, where+".patternProperties."+name); err != nil {
			return err
		}
	}
	kids := []*jsonschema.Schema{s.Items, s.AdditionalProperties, s.AdditionalItems, s.Not, s.If, s.Then, s.Else,
		s.Contains, s.PropertyNames, s.UnevaluatedItems, s.UnevaluatedProperties}
	kids = append(append(append(append(append(kids, s.AllOf...), s.AnyOf...), s.OneOf...), s.PrefixItems...), s.ItemsArray...)
	for _, k := range kids {
		if err := checkKeywords(k, where); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Refusal says why airlock refused a call, or why it failed, so that
// code and a model can act on it: Kind is the error's (an errdefs
// sentinel), Field the argument and Rule the keyword or check it broke,
// Msg a sentence; RetryAfter, when set, says when a rate or budget
// allows the call again.
type Refusal struct {
	Kind             error
	Field, Rule, Msg string
	RetryAfter       time.Duration
	// failed: the call was made (refusals are decided before).
	failed bool
}

func (r *Refusal) Error() string {
	if r.Field != "" {
		return r.Field + ": " + r.Msg
	}
	return r.Msg
}

func (r *Refusal) Unwrap() error { return r.Kind }

// decodeArgs decodes a call's arguments: one JSON object (an empty body
// is {}).
func decodeArgs(body []byte) (map[string]any, *Refusal) {
	if len(bytes.TrimSpace(body)) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &Refusal{Kind: errdefs.ErrInvalidArgument, Rule: "json", Msg: "the arguments are not JSON: " + clip(err.Error(), 120)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &Refusal{Kind: errdefs.ErrInvalidArgument, Rule: "json", Msg: "the arguments hold more than one JSON value"}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, &Refusal{Kind: errdefs.ErrInvalidArgument, Rule: "type", Msg: "the arguments must be a JSON object of name: value"}
	}
	return m, nil
}

// validate checks args against the schema; the refusal names the first
// argument at fault and the rule it broke.
func (s *argSchema) validate(args map[string]any) *Refusal {
	bad := func(field, rule, msg string) *Refusal {
		return &Refusal{Kind: errdefs.ErrInvalidArgument, Field: field, Rule: rule, Msg: msg}
	}
	for _, name := range sortedKeys(args) {
		if _, ok := s.root.Properties[name]; !ok && isClosed(s.root) {
			return bad(name, "additionalProperties", fmt.Sprintf("the tool takes no argument %q; it takes: %s", clip(name, 64), strings.Join(s.props, ", ")))
		}
	}
	for _, name := range s.root.Required {
		if _, ok := args[name]; !ok {
			return bad(name, "required", "this argument is required")
		}
	}
	err := s.resolved.Validate(args)
	if err == nil {
		return nil
	}
	// The validator's errors nest "validating <path>: ..." around the
	// keyword's own ("maxLength: ..."): the last path names the field.
	var path, inner string
	for e := err; e != nil; e = errors.Unwrap(e) {
		msg := e.Error()
		if rest, ok := strings.CutPrefix(msg, "validating "); ok {
			path, _, _ = strings.Cut(rest, ": ")
			continue
		}
		inner = msg
		break
	}
	field := fieldOf(path)
	rule, _, _ := strings.Cut(inner, ":")
	if strings.HasPrefix(inner, "unexpected additional properties") {
		rule = "additionalProperties"
	}
	if p, ok := s.root.Properties[field]; ok && !strings.Contains(field, ".") {
		if msg := explain(p, rule); msg != "" {
			return bad(field, rule, msg)
		}
	}
	return bad(field, rule, clip(inner, 200))
}

func isClosed(s *jsonschema.Schema) bool {
	a := s.AdditionalProperties
	return a != nil && a.Not != nil && len(s.PatternProperties) == 0
}

// fieldOf turns a schema path (/properties/a/items/properties/b) into an
// argument's name (a.b); "" is the arguments as a whole.
func fieldOf(path string) string {
	var out []string
	segs := strings.Split(path, "/")
	for i := 0; i+1 < len(segs); i++ {
		if segs[i] == "properties" {
			out = append(out, segs[i+1])
			i++
		}
	}
	return strings.Join(out, ".")
}

// explain says what a scalar property's rule wants, from the schema's
// own values (never echoing the value sent, which may be large).
func explain(p *jsonschema.Schema, rule string) string {
	num := func(f *float64) string { return fmt.Sprint(*f) }
	switch {
	case rule == "type" && p.Type != "":
		return "must be " + article(p.Type)
	case rule == "maxLength" && p.MaxLength != nil:
		return fmt.Sprintf("must be at most %d characters", *p.MaxLength)
	case rule == "minLength" && p.MinLength != nil:
		return fmt.Sprintf("must be at least %d characters", *p.MinLength)
	case rule == "pattern":
		return "must match the pattern " + clip(p.Pattern, 200)
	case rule == "enum":
		var vals []string
		for _, v := range p.Enum {
			b, _ := json.Marshal(v)
			vals = append(vals, string(b))
		}
		return "must be one of: " + clip(strings.Join(vals, ", "), 400)
	case rule == "const" && p.Const != nil:
		b, _ := json.Marshal(*p.Const)
		return "must be " + clip(string(b), 200)
	case rule == "minimum" && p.Minimum != nil:
		return "must be at least " + num(p.Minimum)
	case rule == "maximum" && p.Maximum != nil:
		return "must be at most " + num(p.Maximum)
	case rule == "exclusiveMinimum" && p.ExclusiveMinimum != nil:
		return "must be more than " + num(p.ExclusiveMinimum)
	case rule == "exclusiveMaximum" && p.ExclusiveMaximum != nil:
		return "must be less than " + num(p.ExclusiveMaximum)
	case rule == "multipleOf" && p.MultipleOf != nil:
		return "must be a multiple of " + num(p.MultipleOf)
	}
	return ""
}

func article(t string) string {
	if t == "integer" || t == "object" || t == "array" {
		return "an " + t
	}
	return "a " + t
}

// clip shortens s to at most n bytes (on a rune boundary), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

func validUTF8(s string) bool { return utf8.ValidString(s) }
