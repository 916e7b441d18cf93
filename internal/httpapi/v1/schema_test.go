package v1

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/runtimes"
)

// schemaTypes maps the OpenAPI document's object schemas to the Go wire
// types the server and the client encode and decode.
var schemaTypes = map[string]reflect.Type{
	"Error":                reflect.TypeFor[apitype.ErrorBody](),
	"Port":                 reflect.TypeFor[apitype.Port](),
	"PortRequest":          reflect.TypeFor[apitype.PortRequest](),
	"PortList":             reflect.TypeFor[apitype.PortList](),
	"Template":             reflect.TypeFor[apitype.Template](),
	"TemplateList":         reflect.TypeFor[apitype.TemplateList](),
	"Limits":               reflect.TypeFor[config.Limits](),
	"ResolvedLimits":       reflect.TypeFor[config.Limits](),
	"CreateSessionRequest": reflect.TypeFor[apitype.CreateSessionRequest](),
	"Session":              reflect.TypeFor[apitype.Session](),
	"PausedInfo":           reflect.TypeFor[apitype.PausedInfo](),
	"RecoveryPoint":        reflect.TypeFor[apitype.RecoveryPoint](),
	"PauseSkipped":         reflect.TypeFor[apitype.PauseSkipped](),
	"TimeoutRequest":       reflect.TypeFor[apitype.TimeoutRequest](),
	"PauseRequest":         reflect.TypeFor[apitype.PauseRequest](),
	"ResumeRequest":        reflect.TypeFor[apitype.ResumeRequest](),
	"SessionList":          reflect.TypeFor[apitype.SessionList](),
	"Output":               reflect.TypeFor[apitype.Output](),
	"ExecError":            reflect.TypeFor[apitype.ExecError](),
	"FileChange":           reflect.TypeFor[apitype.FileChange](),
	"Result":               reflect.TypeFor[apitype.Result](),
	"ExecuteRequest":       reflect.TypeFor[apitype.ExecuteRequest](),
	"InputFile":            reflect.TypeFor[apitype.InputFile](),
	"OneShotRequest":       reflect.TypeFor[apitype.OneShotRequest](),
	"OutputFile":           reflect.TypeFor[apitype.OutputFile](),
	"OneShotResult":        reflect.TypeFor[apitype.OneShotResult](),
	"Event":                reflect.TypeFor[apitype.Event](),
	"Entry":                reflect.TypeFor[apitype.Entry](),
	"FileList":             reflect.TypeFor[apitype.FileList](),
	"UploadResult":         reflect.TypeFor[apitype.UploadResult](),
	"Health":               reflect.TypeFor[apitype.Health](),
	"Readiness":            reflect.TypeFor[apitype.Readiness](),
	"InterruptResult":      reflect.TypeFor[apitype.InterruptResult](),
	"ProgramRequest":       reflect.TypeFor[apitype.ProgramRequest](),
	"CommandRequest":       reflect.TypeFor[apitype.CommandRequest](),
	"CommandResult":        reflect.TypeFor[apitype.CommandResult](),
	"CommandList":          reflect.TypeFor[apitype.CommandList](),
	"SignalRequest":        reflect.TypeFor[apitype.SignalRequest](),
	"StdinRequest":         reflect.TypeFor[apitype.StdinRequest](),
	"PTYSize":              reflect.TypeFor[apitype.PTYSize](),
	"TerminalInput":        reflect.TypeFor[apitype.TerminalInput](),
	"AuditRecord":          reflect.TypeFor[apitype.AuditRecord](),
	"AuditNetwork":         reflect.TypeFor[apitype.AuditNetwork](),
	"AuditList":            reflect.TypeFor[apitype.AuditList](),
	"EgressDecision":       reflect.TypeFor[apitype.EgressDecision](),
	"NetworkPolicy":        reflect.TypeFor[apitype.NetworkPolicy](),
	"NetworkState":         reflect.TypeFor[apitype.NetworkState](),
	"PackagesRequest":      reflect.TypeFor[apitype.PackagesRequest](),
	"PackagesResult":       reflect.TypeFor[apitype.PackagesResult](),
	"Package":              reflect.TypeFor[apitype.Package](),
	"Usage":                reflect.TypeFor[apitype.Usage](),
	"CurrentExecution":     reflect.TypeFor[apitype.CurrentExecution](),
	"HistoryLimits":        reflect.TypeFor[apitype.HistoryLimits](),
	"HistoryEntry":         reflect.TypeFor[apitype.HistoryEntry](),
	"History":              reflect.TypeFor[apitype.History](),
	"Whoami":               reflect.TypeFor[apitype.Whoami](),
	"CreateContextRequest": reflect.TypeFor[apitype.CreateContextRequest](),
	"CodeContext":          reflect.TypeFor[apitype.CodeContext](),
	"ContextList":          reflect.TypeFor[apitype.ContextList](),
	"ToolInfo":             reflect.TypeFor[apitype.ToolInfo](),
	"ToolList":             reflect.TypeFor[apitype.ToolList](),
	"SecretList":           reflect.TypeFor[apitype.SecretList](),
	"SecretInfo":           reflect.TypeFor[apitype.SecretInfo](),
	"ToolCall":             reflect.TypeFor[apitype.ToolCall](),
}

// scalarSchemas are the components that are not objects: the limit
// types' two forms and the vocabularies.
var scalarSchemas = map[string]reflect.Type{
	"Size":         reflect.TypeFor[config.Size](),
	"Duration":     reflect.TypeFor[config.Duration](),
	"Count":        reflect.TypeFor[config.Count](),
	"SessionEnded": reflect.TypeFor[string](), // the end_reason sentences
	"EndCode":      reflect.TypeFor[apitype.EndCode](),
	"MimeBundle":   reflect.TypeFor[map[string]json.RawMessage](),
	"Isolation":    reflect.TypeFor[config.Isolation](),
}

// requiredExceptions are properties whose required-ness in the document
// differs from the Go field's omitempty, with the reason.
var requiredExceptions = map[string]string{
	// config.Limits is also the request's Limits, where every field is
	// optional; in responses config.Resolve has filled every field.
	"ResolvedLimits": "every field is set in responses",
}

// enums are the documented enums the server's vocabularies must match.
func enums() map[string][]string {
	str := func(vs ...string) []string { return vs }
	var kills, ends []string
	for _, k := range apitype.KillReasons() {
		kills = append(kills, string(k))
	}
	for _, e := range apitype.EndCodes() {
		ends = append(ends, string(e))
	}
	var codes []string
	for _, k := range errdefs.Kinds() {
		codes = append(codes, k.Code)
	}
	return map[string][]string{
		"Result.kill_reason": append([]string{""}, kills...),
		"EndCode":            ends,
		"Event.type":         apitype.EventTypes(),
		"Session.state":      str(apitype.StateIdle, apitype.StateBusy, apitype.StatePaused, apitype.StateEnded),
		"Session.on_timeout": str(apitype.OnTimeoutEnd, apitype.OnTimeoutPause),
		"Session.restores":   str(apitype.RestoreFiles, apitype.RestoreMemory),
		"Session.restored":   str(apitype.RestoreFiles, apitype.RestoreMemory),
		"CodeContext.state":  str(apitype.ContextIdle, apitype.ContextBusy, apitype.ContextEnded),
		"Session.language":   runtimes.Names(),
		"Output.type":        str(apitype.OutputResult, apitype.OutputDisplay),
		"FileChange.change":  str(apitype.Created, apitype.Modified, apitype.Deleted),
		"Error.error.code":   codes,
		"Isolation":          str(string(config.Native), string(config.GVisor)),
	}
}

// schemaDoc is the document with helpers to read schemas.
type schemaDoc struct {
	t   *testing.T
	doc map[string]any
}

func (d schemaDoc) component(name string) map[string]any {
	s, _ := resolvePointer(d.doc, "#/components/schemas/"+name)
	m, _ := s.(map[string]any)
	return m
}

// refName returns the component a schema refers to: {"$ref"}, or an
// allOf of one {"$ref"} (the way to add a description to a reference).
func refName(s map[string]any) string {
	if ref, ok := s["$ref"].(string); ok {
		return strings.TrimPrefix(ref, "#/components/schemas/")
	}
	if all, ok := s["allOf"].([]any); ok && len(all) == 1 {
		if m, ok := all[0].(map[string]any); ok {
			return refName(m)
		}
	}
	return ""
}

// object flattens an object schema: its properties and required names,
// through $ref and allOf.
func (d schemaDoc) object(s map[string]any) (props map[string]map[string]any, required []string) {
	props = map[string]map[string]any{}
	var add func(s map[string]any)
	add = func(s map[string]any) {
		if name := refName(s); name != "" {
			add(d.component(name))
			return
		}
		for _, part := range asList(s["allOf"]) {
			add(part.(map[string]any))
		}
		for k, v := range asMap(s["properties"]) {
			props[k] = v.(map[string]any)
		}
		for _, r := range asList(s["required"]) {
			required = append(required, r.(string))
		}
	}
	add(s)
	return props, required
}

func asList(v any) []any         { l, _ := v.([]any); return l }
func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }

// goField is one JSON field of a Go struct.
type goField struct {
	name     string
	typ      reflect.Type
	required bool
}

// goFields lists t's JSON fields as encoding/json sees them, embedded
// structs flattened.
func goFields(t reflect.Type) []goField {
	var out []goField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			out = append(out, goFields(et)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		optional := slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")
		out = append(out, goField{name: name, typ: f.Type, required: !optional})
	}
	return out
}

// compareObject checks the Go struct t against the object schema s.
func (d schemaDoc) compareObject(where string, t reflect.Type, s map[string]any, checkRequired bool) {
	props, required := d.object(s)
	fields := goFields(t)
	var goNames, goRequired []string
	for _, f := range fields {
		goNames = append(goNames, f.name)
		if f.required {
			goRequired = append(goRequired, f.name)
		}
		p, ok := props[f.name]
		if !ok {
			d.t.Errorf("%s: Go field %q (%s) is not in the schema", where, f.name, f.typ)
			continue
		}
		d.compareType(where+"."+f.name, f.typ, p)
		// A pointer to a number or string always sent is there to be null
		// at times (a running command's exit_code): the schema must say so.
		if f.required && f.typ.Kind() == reflect.Pointer && f.typ.Elem().Kind() != reflect.Struct && p["nullable"] != true {
			d.t.Errorf("%s.%s: Go %s is sent as null when nil, but the schema is not nullable", where, f.name, f.typ)
		}
	}
	for name := range props {
		if !slices.Contains(goNames, name) {
			d.t.Errorf("%s: schema property %q is not a field of %s", where, name, t)
		}
	}
	if checkRequired {
		sort.Strings(goRequired)
		sort.Strings(required)
		if !slices.Equal(goRequired, required) {
			d.t.Errorf("%s: required %q in the schema, but %q in Go (fields without omitempty)", where, required, goRequired)
		}
	}
}

// compareType checks one Go type against the schema of a property (or an
// array's items).
func (d schemaDoc) compareType(where string, t reflect.Type, s map[string]any) {
	// A nullable reference is anyOf [ref, null].
	if alts := asList(s["anyOf"]); len(alts) > 0 {
		var real []map[string]any
		for _, a := range alts {
			if m := a.(map[string]any); m["nullable"] != true {
				real = append(real, m)
			}
		}
		if len(real) != 1 || t.Kind() != reflect.Pointer {
			d.t.Errorf("%s: anyOf is only for a nullable pointer, got %s", where, t)
			return
		}
		s = real[0]
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	ref := refName(s)
	typ, _ := s["type"].(string)
	want := func(ok bool, what string) {
		if !ok {
			d.t.Errorf("%s: Go %s, but the schema says %s (type %q, $ref %q)", where, t, what, typ, ref)
		}
	}
	switch t {
	case reflect.TypeFor[config.Duration]():
		want(ref == "Duration" || typ == "string", "neither Duration nor a string")
		return
	case reflect.TypeFor[config.Size](), reflect.TypeFor[config.Count]():
		want(ref == t.Name() || typ == "integer", "neither "+t.Name()+" nor an integer")
		return
	case reflect.TypeFor[time.Time]():
		want(typ == "string" && s["format"] == "date-time", "not a date-time string")
		return
	case reflect.TypeFor[json.RawMessage]():
		want(typ == "" && ref == "" || typ == "object", "a restricted type for free-form JSON")
		return
	case reflect.TypeFor[map[string]json.RawMessage]():
		want(ref == "MimeBundle" || typ == "object" && asMap(s["additionalProperties"]) != nil, "neither a MimeBundle nor a free-form object")
		return
	}
	if ref != "" {
		if st, ok := schemaTypes[ref]; ok {
			want(st == t, "a reference to "+ref+" (of "+st.String()+")")
			return
		}
		st, ok := scalarSchemas[ref]
		want(ok && st.Kind() == t.Kind(), "a reference to "+ref)
		return
	}
	switch t.Kind() {
	case reflect.String:
		want(typ == "string", "not a string")
	case reflect.Bool:
		want(typ == "boolean", "not a boolean")
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64:
		want(typ == "integer", "not an integer")
	case reflect.Float64:
		want(typ == "number", "not a number")
	case reflect.Slice:
		want(typ == "array", "not an array")
		if typ == "array" {
			d.compareType(where+"[]", t.Elem(), asMap(s["items"]))
		}
	case reflect.Map:
		want(typ == "object" && t.Key().Kind() == reflect.String, "not an object")
		if ap := asMap(s["additionalProperties"]); ap != nil && len(ap) > 0 {
			d.compareType(where+"{}", t.Elem(), ap)
		}
	case reflect.Struct:
		// An object described inline (the error body's detail).
		want(typ == "object" && s["properties"] != nil, "not an inline object")
		if typ == "object" {
			d.compareObject(where, t, s, true)
		}
	default:
		d.t.Errorf("%s: Go %s has no schema rule", where, t)
	}
}

// TestOpenAPISchemas checks every schema of the document against the Go
// type that is encoded or decoded for it: the same fields, each of a
// matching type, required exactly when the Go field has no omitempty, and
// the documented enums equal to the server's vocabularies.
func TestOpenAPISchemas(t *testing.T) {
	d := schemaDoc{t: t, doc: loadOpenAPI(t)}
	comps := asMap(asMap(d.doc["components"])["schemas"])
	for name := range comps {
		_, obj := schemaTypes[name]
		_, scalar := scalarSchemas[name]
		if !obj && !scalar {
			t.Errorf("schema %s has no Go type in schemaTypes or scalarSchemas", name)
		}
	}
	for name, typ := range schemaTypes {
		s := d.component(name)
		if s == nil {
			t.Errorf("no schema %s for %s", name, typ)
			continue
		}
		_, skip := requiredExceptions[name]
		d.compareObject(name, typ, s, !skip)
	}
	for path, want := range enums() {
		s := d.component(strings.Split(path, ".")[0])
		for _, p := range strings.Split(path, ".")[1:] {
			props, _ := d.object(s)
			s = props[p]
		}
		if name := refName(s); name != "" {
			s = d.component(name)
		}
		var got []string
		for _, v := range asList(s["enum"]) {
			got = append(got, v.(string))
		}
		sort.Strings(got)
		want = slices.Clone(want)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: the document's enum is %q, the server's %q", path, got, want)
		}
	}
	// Every property that carries an end code refers to the EndCode enum.
	for _, path := range []string{"Result.end_code", "Session.end_code", "Error.error.end_code"} {
		s := d.component(strings.Split(path, ".")[0])
		for _, p := range strings.Split(path, ".")[1:] {
			props, _ := d.object(s)
			s = props[p]
		}
		if refName(s) != "EndCode" {
			t.Errorf("%s does not refer to EndCode", path)
		}
	}
}
