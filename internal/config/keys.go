package config

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"airlock/internal/errdefs"
)

// Error is what is wrong with a configuration: one problem a line, each
// naming its full key (server.listen) and, for a value that could not be
// read, where it was set (the file, an AIRLOCK_ variable, a flag). It is
// an ErrInvalidArgument.
type Error struct {
	Problems []string
}

func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return "invalid configuration: " + e.Problems[0]
	}
	return "invalid configuration:\n  " + strings.Join(e.Problems, "\n  ")
}

func (e *Error) Unwrap() error { return errdefs.ErrInvalidArgument }

// Problems makes err a configuration error, one problem a line (nil: nil),
// for checks of the configuration made outside this package (the
// patterns of redaction and code rules, which their users compile).
func Problems(err error) error {
	var p problems
	p.add("", err)
	return p.err()
}

// problems collects a configuration's problems.
type problems []string

// add records err (nil: nothing), prefixed with where, without the
// sentinel's words: the whole is one ErrInvalidArgument, said once.
func (p *problems) add(where string, err error) {
	if err == nil {
		return
	}
	var ce *Error
	if errors.As(err, &ce) {
		for _, q := range ce.Problems {
			p.addText(where, q)
		}
		return
	}
	for _, line := range strings.Split(reason(err), "\n") {
		p.addText(where, line)
	}
}

func (p *problems) addText(where, text string) {
	if where != "" {
		text = where + ": " + text
	}
	*p = append(*p, text)
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return &Error{Problems: p}
}

// reason is err's message without the "invalid argument: " its
// sentinel put in it (in front, or inside where it was wrapped again).
func reason(err error) string {
	return strings.ReplaceAll(err.Error(), errdefs.ErrInvalidArgument.Error()+": ", "")
}

// Flag is a command-line flag that sets a configuration key: it goes
// through the same reading and validation as the file and the
// environment.
type Flag struct {
	Name  string // as the user typed it: "--listen"
	Key   string // the key's path: "server.listen"
	Value string // read like an AIRLOCK_ variable's value
}

// Sources are what a configuration is built from. Build applies them over
// the defaults in this order, and validates the result once.
type Sources struct {
	// File is the JSON file; "" reads $AIRLOCK_CONFIG from Env, and
	// without it there is none.
	File string
	// Env is the environment (KEY=VALUE lines, as os.Environ).
	Env []string
	// Flags are the command line's overrides, applied last.
	Flags []Flag
}

// Build returns the effective configuration: the defaults, then the file,
// then the AIRLOCK_ variables, then the flags, then the secrets' files,
// and then Validate. It is the one place a configuration is put together,
// so that no source can bypass the checks of another.
func Build(src Sources) (Config, error) {
	c := Default()
	path := src.File
	if path == "" {
		path = lookupEnv(src.Env, "AIRLOCK_CONFIG")
	}
	if path != "" {
		if err := c.loadFile(path); err != nil {
			return Config{}, err
		}
	}
	if err := c.ApplyEnv(src.Env); err != nil {
		return Config{}, err
	}
	if err := c.applyFlags(src.Flags); err != nil {
		return Config{}, err
	}
	if err := c.loadSecretFiles(); err != nil {
		return Config{}, err
	}
	return c, c.Validate()
}

func lookupEnv(env []string, name string) string {
	val := ""
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			val = v // the last one wins, as in getenv
		}
	}
	return val
}

func (c *Config) loadFile(path string) error {
	f, err := openConfig(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return &Error{Problems: []string{fmt.Sprintf("%s: %v", path, err)}}
	}
	var p problems
	p.add(path, decodeKeys(data, reflect.ValueOf(c).Elem(), ""))
	return p.err()
}

// applyFlags sets the keys the flags name.
func (c *Config) applyFlags(flags []Flag) error {
	var p problems
	for _, f := range flags {
		path := strings.Split(f.Key, ".")
		if _, known := envKeys()[envName(path)]; !known {
			// A programming error, but a clear one.
			p.addText(f.Name, "unknown configuration key "+f.Key)
			continue
		}
		p.add(f.Name, setValue(fieldAt(c, path), f.Value, f.Key))
	}
	return p.err()
}

// decodeKeys decodes data, a JSON value, into v (the value of key, ""
// for the whole configuration) key by key: an unknown key or a value of
// the wrong type is an error naming its full key. Objects decode over
// what v holds, as encoding/json does (a file overrides the defaults key
// by key); keys match their names exactly.
func decodeKeys(data []byte, v reflect.Value, key string) error {
	var p problems
	decodeValue(&p, data, v, key)
	if len(p) == 0 {
		// One value, and nothing after it.
		if err := Decode(data, new(json.RawMessage)); err != nil {
			p.addText(key, leafReason(err))
		}
	}
	return p.err()
}

func syntaxErr(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("not valid JSON (at byte %d): %v", se.Offset, se)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("not valid JSON: it ends too early")
	}
	return err
}

func decodeValue(p *problems, data []byte, v reflect.Value, key string) {
	data = bytes.TrimSpace(data)
	t := v.Type()
	switch {
	case bytes.Equal(data, []byte("null")) || !walkable(t):
		// A leaf: encoding/json with its strictness.
		if err := Decode(data, v.Addr().Interface()); err != nil {
			p.addText(key, leafReason(err))
		}
	case t.Kind() == reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		decodeValue(p, data, v.Elem(), key)
	case t.Kind() == reflect.Struct:
		object(p, data, key, func(name string, raw json.RawMessage) {
			f, ok := field(v, name)
			if !ok {
				p.addText("", "unknown configuration key "+join(key, name))
				return
			}
			decodeValue(p, raw, f, join(key, name))
		})
	case t.Kind() == reflect.Map:
		if v.IsNil() {
			v.Set(reflect.MakeMap(t))
		}
		object(p, data, key, func(name string, raw json.RawMessage) {
			elem := reflect.New(t.Elem()).Elem()
			if old := v.MapIndex(reflect.ValueOf(name)); old.IsValid() {
				elem.Set(old)
			}
			decodeValue(p, raw, elem, join(key, name))
			v.SetMapIndex(reflect.ValueOf(name), elem)
		})
	case t.Kind() == reflect.Slice:
		var items []json.RawMessage
		if err := json.Unmarshal(data, &items); err != nil {
			p.addText(key, leafReason(err))
			return
		}
		s := reflect.MakeSlice(t, len(items), len(items))
		for i, raw := range items {
			decodeValue(p, raw, s.Index(i), fmt.Sprintf("%s[%d]", key, i))
		}
		v.Set(s)
	}
}

// object calls fn for each key of the JSON object data, in order.
func object(p *problems, data []byte, key string, fn func(name string, raw json.RawMessage)) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		if err != nil {
			p.addText(key, syntaxErr(err).Error())
		} else {
			p.addText(key, "want an object, not "+jsonKind(data))
		}
		return
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			p.addText(key, syntaxErr(err).Error())
			return
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			p.addText(key, syntaxErr(err).Error())
			return
		}
		fn(tok.(string), raw)
	}
}

// walkable reports whether values of t are decoded key by key: structs
// (and pointers to them), maps by name, and lists of structs, unless the
// type reads itself.
func walkable(t reflect.Type) bool {
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) ||
		reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		return false
	}
	switch t.Kind() {
	case reflect.Struct:
		return true
	case reflect.Pointer, reflect.Slice:
		return walkable(t.Elem())
	case reflect.Map:
		return t.Key().Kind() == reflect.String
	}
	return false
}

// field finds the field of struct v whose JSON name is name.
func field(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); n == name && n != "-" {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func join(key, name string) string {
	if key == "" {
		return name
	}
	return key + "." + name
}

// leafReason says what is wrong with a value, in the configuration's
// words rather than Go's.
func leafReason(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("want %s, not %s", typeWords(te.Type), article(te.Value))
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return syntaxErr(se).Error()
	}
	if strings.Contains(err.Error(), "json: unknown field ") {
		// A leaf type's own object (not walked): name the field.
		_, f, _ := strings.Cut(err.Error(), "json: unknown field ")
		return "unknown key " + f
	}
	return reason(err)
}

func typeWords(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

func article(jsonValue string) string {
	switch jsonValue {
	case "array":
		return "a list"
	case "object":
		return "an object"
	case "number", "string":
		return "a " + jsonValue
	case "bool":
		return "a boolean"
	}
	if strings.HasPrefix(jsonValue, "number ") {
		return "the number" + strings.TrimPrefix(jsonValue, "number")
	}
	return jsonValue
}

func jsonKind(data []byte) string {
	switch data[0] {
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
