package docgen

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"airlock/internal/config"
)

// hostDependent are the keys whose default depends on the host: the
// reference says how instead of this host's value.
var hostDependent = map[string]string{
	"pool.parallel": "the number of CPUs",
}

const configIntro = `airlock serve, run, doctor and mcp read an optional JSON file (` + "`--config FILE`" + ` or
` + "`$AIRLOCK_CONFIG`" + `); unknown keys are an error, and every key has a default. The effective
configuration is the defaults, then the file, then the ` + "`AIRLOCK_*`" + ` environment variables,
then the flags of the command that set keys (` + "`serve --listen`" + `, ` + "`serve -v`" + `), then the
secrets' ` + "`*_file`" + ` variants; the whole is then validated once, and an invalid one makes
the command exit 78 with every problem naming its key and where it was set.
` + "`airlock config print`" + ` shows the effective configuration (secrets masked).

**Environment.** Every key can be set by ` + "`AIRLOCK_`" + ` and its path in capitals joined by
` + "`_`" + `: ` + "`server.listen`" + ` is ` + "`AIRLOCK_SERVER_LISTEN`" + `, a whole section is its JSON
(` + "`AIRLOCK_QUOTAS='{\"max_sessions\": 10}'`" + `); ` + "`airlock config env`" + ` lists them all. A
value is read as JSON when it is valid JSON of the key's type, else as text; lists of
names may be comma-separated. An ` + "`AIRLOCK_`" + ` variable that names no key is an error,
except those listed at the end.

**Units.** A size is a number of bytes or a string such as ` + "`\"256M\"`" + ` (binary units); a
duration is a string such as ` + "`\"5s\"`" + ` or a number of seconds; a count is a
non-negative integer.

`

// configPackages are the packages whose types the configuration is made
// of, by import path: their source is read from the same path under the
// repository's root.
var configPackages = []string{"airlock/internal/config", "airlock/internal/apitype"}

// Configuration renders docs/reference/configuration.md from the
// configuration struct, its defaults and the comments of its fields in
// the source under root.
func Configuration(root string) (string, error) {
	g := &cfgGen{srcs: map[string]*source{}}
	for _, pkg := range configPackages {
		src, err := parseSource(filepath.Join(root, strings.TrimPrefix(pkg, "airlock/")))
		if err != nil {
			return "", err
		}
		g.srcs[pkg] = src
		for _, name := range slices.Sorted(maps.Keys(src.strs)) {
			// config's own constants only: apitype's (JavaScript) are words.
			if pkg == configPackages[0] && exportedCamel(name) {
				g.consts = append(g.consts, [2]string{name, strconv.Quote(src.strs[name])})
			}
		}
	}
	def := config.Default()
	t := reflect.TypeFor[config.Config]()
	var top []row
	type section struct {
		key, doc string
		rows     []row
	}
	var sections []section
	names := g.fieldNames(t)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key, ok := jsonName(f)
		if !ok {
			continue
		}
		fv := reflect.ValueOf(def).Field(i)
		doc := g.doc(t, f, names)
		if isSection(f.Type) {
			if doc == "" {
				doc = g.typeDoc(f.Type, key)
			}
			var rows []row
			g.walk(f.Type, fv, key+".", &rows)
			sections = append(sections, section{key, doc, rows})
			continue
		}
		r := g.row(f, fv, key, doc)
		top = append(top, r)
		if k := f.Type.Kind(); k == reflect.Slice || k == reflect.Map {
			if el := deref(f.Type.Elem()); el.Kind() == reflect.Struct && !leaf(el) {
				var rows []row
				g.walk(el, reflect.Value{}, key+elemSuffix(f.Type), &rows)
				sections = append(sections, section{key, doc, append([]row{r}, rows...)})
				top = top[:len(top)-1]
			}
		}
	}
	if len(g.missing) > 0 {
		return "", fmt.Errorf("configuration keys without a comment in internal/config (document the field): %s",
			strings.Join(g.missing, ", "))
	}

	var b strings.Builder
	b.WriteString(header("Configuration", "internal/config (the Config struct, Default() and the fields' comments)"))
	b.WriteString(configIntro)
	b.WriteString("Sections: [top-level keys](#top-level-keys)")
	for _, s := range sections {
		fmt.Fprintf(&b, ", [%s](#%s)", s.key, anchor(s.key))
	}
	b.WriteString(", [other variables](#other-airlock_-variables).\n\n")
	b.WriteString("## The whole file\n\nThe whole configuration with its defaults")
	for k, v := range hostDependent {
		fmt.Fprintf(&b, " (`%s` is %s; it is left out here)", k, v)
	}
	b.WriteString(":\n\n```json\n")
	b.WriteString(defaultsJSON(def))
	b.WriteString("```\n\n## Top-level keys\n\n")
	writeRows(&b, top)
	for _, s := range sections {
		fmt.Fprintf(&b, "\n## %s\n\n", s.key)
		if s.doc != "" {
			b.WriteString(s.doc + "\n\n")
		}
		writeRows(&b, s.rows)
	}
	b.WriteString("\n## Other AIRLOCK_ variables\n\nThese name no key; the test suites' `AIRLOCK_TEST_*` are allowed too.\n\n| variable | what |\n| --- | --- |\n")
	for _, name := range slices.Sorted(maps.Keys(config.OtherEnv)) {
		fmt.Fprintf(&b, "| `%s` | %s |\n", name, cell(config.OtherEnv[name]))
	}
	return b.String(), nil
}

type row struct{ key, typ, def, doc string }

func writeRows(b *strings.Builder, rows []row) {
	b.WriteString("| key | type | default | what |\n| --- | --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", r.key, r.typ, r.def, cell(r.doc))
	}
}

type cfgGen struct {
	srcs    map[string]*source // by import path
	consts  [][2]string
	missing []string
}

// fieldNames maps the Go names of t's fields to their keys, as
// comments should read.
func (g *cfgGen) fieldNames(t reflect.Type) map[string]string {
	m := map[string]string{}
	for i := 0; i < t.NumField(); i++ {
		if key, ok := jsonName(t.Field(i)); ok {
			m[t.Field(i).Name] = "`" + key + "`"
		}
	}
	for _, c := range g.consts {
		m[c[0]] = "`" + c[1] + "`"
	}
	return m
}

// srcOf is the source of t's package (an empty one for a package not in
// configPackages: its comments count as missing).
func (g *cfgGen) srcOf(t reflect.Type) *source {
	if s, ok := g.srcs[t.PkgPath()]; ok {
		return s
	}
	return &source{}
}

// typeDoc is the comment of type t, read for the key that has it.
func (g *cfgGen) typeDoc(t reflect.Type, key string) string {
	t = deref(t)
	names := map[string]string{t.Name(): "`" + key + "`"}
	if t.Kind() == reflect.Struct {
		for k, v := range g.fieldNames(t) {
			if k != t.Name() {
				names[k] = v
			}
		}
	}
	return rename(g.srcOf(t).types[t.Name()], names)
}

// doc is the comment of field f of t with Go names made keys; a missing
// one is recorded.
func (g *cfgGen) doc(t reflect.Type, f reflect.StructField, names map[string]string) string {
	d := g.srcOf(t).fields[t.Name()][f.Name]
	if d == "" && isSection(f.Type) {
		return ""
	}
	if d == "" && !slices.Contains(g.missing, t.Name()+"."+f.Name) {
		g.missing = append(g.missing, t.Name()+"."+f.Name)
	}
	return rename(d, names)
}

// walk adds a row for every key of the struct type t under prefix; v is
// its default (invalid where there is none: inside lists and maps).
func (g *cfgGen) walk(t reflect.Type, v reflect.Value, prefix string, rows *[]row) {
	names := g.fieldNames(t)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key, ok := jsonName(f)
		if !ok {
			continue
		}
		var fv reflect.Value
		if v.IsValid() {
			fv = v.Field(i)
		}
		doc := g.doc(t, f, names)
		ft := deref(f.Type)
		if doc == "" {
			doc = g.typeDoc(ft, prefix+key)
		}
		*rows = append(*rows, g.row(f, fv, prefix+key, doc))
		switch {
		case ft.Kind() == reflect.Struct && !leaf(ft):
			if f.Type.Kind() == reflect.Pointer {
				fv = reflect.Value{}
			}
			g.walk(ft, fv, prefix+key+".", rows)
		case (ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map) && deref(ft.Elem()).Kind() == reflect.Struct && !leaf(deref(ft.Elem())):
			g.walk(deref(ft.Elem()), reflect.Value{}, prefix+key+elemSuffix(ft), rows)
		}
	}
}

func (g *cfgGen) row(f reflect.StructField, v reflect.Value, key, doc string) row {
	def := "—"
	if d, ok := hostDependent[key]; ok {
		def = d
	} else if v.IsValid() {
		def = "`" + value(v) + "`"
	}
	return row{key: key, typ: typeWords(f.Type), def: def, doc: doc}
}

func elemSuffix(t reflect.Type) string {
	if t.Kind() == reflect.Map {
		return ".NAME."
	}
	return "[]."
}

func jsonName(f reflect.StructField) (string, bool) {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name, name != "" && name != "-" && f.IsExported()
}

func deref(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

var (
	sizeType     = reflect.TypeFor[config.Size]()
	durationType = reflect.TypeFor[config.Duration]()
	countType    = reflect.TypeFor[config.Count]()
)

// leaf reports whether a struct type is one value (it reads itself).
func leaf(t reflect.Type) bool {
	return t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]())
}

// isSection reports whether a top-level key is a section of keys.
func isSection(t reflect.Type) bool {
	t = deref(t)
	return t.Kind() == reflect.Struct && !leaf(t)
}

func typeWords(t reflect.Type) string {
	switch t {
	case sizeType:
		return "size"
	case durationType:
		return "duration"
	case countType:
		return "count"
	case reflect.TypeFor[json.RawMessage]():
		return "JSON"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeWords(t.Elem())
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Struct:
		return "object"
	case reflect.Slice:
		w := typeWords(t.Elem())
		if strings.HasPrefix(w, "object") {
			return "list of objects"
		}
		return "list of " + w + "s"
	case reflect.Map:
		w := typeWords(t.Elem())
		if strings.HasPrefix(w, "object") {
			return "object of objects by name"
		}
		return "object of " + w + "s"
	}
	return t.String()
}

// value renders a default as the configuration file would have it.
func value(v reflect.Value) string {
	switch v.Type() {
	case sizeType:
		s := config.Size(v.Int())
		if s == 0 {
			return "0"
		}
		return strconv.Quote(s.String())
	case durationType:
		return strconv.Quote(shortDuration(config.Duration(v.Int())))
	}
	switch v.Kind() {
	case reflect.Slice:
		var parts []string
		for i := 0; i < v.Len(); i++ {
			parts = append(parts, value(v.Index(i)))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case reflect.Map:
		var parts []string
		for _, k := range v.MapKeys() {
			parts = append(parts, strconv.Quote(k.String())+": "+value(v.MapIndex(k)))
		}
		slices.Sort(parts)
		return "{" + strings.Join(parts, ", ") + "}"
	case reflect.Pointer:
		if v.IsNil() {
			return "null"
		}
	case reflect.Struct:
		return compact(v)
	}
	b, _ := json.Marshal(v.Interface())
	return string(b)
}

// shortDuration writes d as the configuration would: "15m", not "15m0s".
func shortDuration(d config.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// compact renders a struct value on one line, keys in the struct's order.
func compact(v reflect.Value) string {
	var parts []string
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		key, ok := jsonName(f)
		if !ok || (strings.Contains(f.Tag.Get("json"), ",omit") && v.Field(i).IsZero()) {
			continue
		}
		parts = append(parts, strconv.Quote(key)+": "+value(v.Field(i)))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// defaultsJSON renders the defaults as a configuration file, one key a
// line at the top level and one section a line, in the struct's order.
func defaultsJSON(def config.Config) string {
	v := reflect.ValueOf(def)
	t := v.Type()
	var lines []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key, ok := jsonName(f)
		if !ok || (strings.Contains(f.Tag.Get("json"), ",omit") && v.Field(i).IsZero()) {
			continue
		}
		fv := v.Field(i)
		if key == "version" {
			fv = reflect.ValueOf(1)
		}
		var val string
		if isSection(f.Type) {
			val = section(fv, key+".")
		} else {
			val = value(fv)
		}
		lines = append(lines, "  "+strconv.Quote(key)+": "+val)
	}
	return "{\n" + strings.Join(lines, ",\n") + "\n}\n"
}

// section renders a section's value with its sub-sections on lines of
// their own, leaving out host-dependent keys.
func section(v reflect.Value, prefix string) string {
	var parts []string
	nested := false
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		key, ok := jsonName(f)
		if !ok || (strings.Contains(f.Tag.Get("json"), ",omit") && v.Field(i).IsZero()) {
			continue
		}
		if _, ok := hostDependent[prefix+key]; ok {
			continue
		}
		val := value(v.Field(i))
		nested = nested || isSection(f.Type)
		parts = append(parts, strconv.Quote(key)+": "+val)
	}
	if nested || len(strings.Join(parts, ", ")) > 100 {
		return "{\n    " + strings.Join(parts, ",\n    ") + "\n  }"
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
