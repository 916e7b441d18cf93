// Package secrets owns placeholder secrets: credentials the operator
// binds to hosts, which a sandbox sees only as an opaque per-session
// placeholder (in an environment variable) and which the egress gate
// swaps in for that placeholder in requests to the bound hosts only. It
// reads their values (from a file or the server's environment, never the
// configuration text), makes the placeholders, says where a value may be
// substituted (headers, and the query or body when the operator allows
// it), replaces a value echoed back in an answer with its placeholder,
// and keeps the certificate authority the gate presents to sandboxes for
// bound hosts (a name-constrained anchor, see CA).
//
// It must never put a value in an error, a log line or anything else a
// sandbox or a client may read, and never substitute a value toward a
// host it is not bound to.
package secrets

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
)

// Spec is a secret as the operator declares it.
type Spec struct {
	Name string
	// File or Env is where the value is read from (one of them).
	File, Env string
	// Hosts are the names the value may be sent to (exact, lower case).
	Hosts []string
	// Headers narrow the header fields it may be substituted in (none:
	// any header).
	Headers []string
	// Query and Body allow it in the URL's query and in request bodies.
	Query, Body bool
	// PlainHTTP allows it in plain http:// requests (default: only in
	// HTTPS ones).
	PlainHTTP bool
	// EnvVar is the variable holding the placeholder inside the sandbox.
	EnvVar string
}

// MinValue is the shortest value accepted: a shorter one could not be
// told apart from ordinary text when answers are redacted.
const MinValue = 8

// MaxValue bounds a value: it goes into a header line.
const MaxValue = 8 << 10

// MaxForm bounds a value's longest form (see Forms): output redaction
// finds matches of at most this many bytes (redact.MaxMatch).
const MaxForm = 16 << 10

// secret is a Spec with its value read.
type secret struct {
	Spec
	value string
	forms []form // the value as an answer could echo it
}

// Set is every secret of the server, by tenant.
type Set struct {
	server map[string]*secret            // every tenant's
	own    map[string]map[string]*secret // tenant -> its own
	ca     *CA
}

// New reads every secret's value (env is the server's environment) and
// keeps the CA. An error names the secret and never holds a value.
func New(server []Spec, tenants map[string][]Spec, ca *CA, env []string) (*Set, error) {
	s := &Set{server: map[string]*secret{}, own: map[string]map[string]*secret{}, ca: ca}
	var errs []error
	load := func(prefix string, specs []Spec, into map[string]*secret) {
		for _, sp := range specs {
			v, err := Read(sp.File, sp.Env, env)
			if err == nil && len(v) > MaxValue {
				err = fmt.Errorf("the secret (%s) is longer than %d bytes", sourceName(sp.File, sp.Env), MaxValue)
			}
			if err == nil && strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
				err = fmt.Errorf("the secret (%s) holds a control character: it could not be sent in a header", sourceName(sp.File, sp.Env))
			}
			if err == nil && slices.ContainsFunc(Forms(v), func(f string) bool { return len(f) > MaxForm }) {
				err = fmt.Errorf("the secret (%s) is longer than %d bytes once URL-escaped: too long for output redaction to find", sourceName(sp.File, sp.Env), MaxForm)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%ssecrets.%s: %v", prefix, sp.Name, err))
				continue
			}
			if sp.EnvVar == "" {
				sp.EnvVar = sp.Name
			}
			into[sp.Name] = &secret{Spec: sp, value: v, forms: formsOf(v)}
		}
	}
	load("", server, s.server)
	for _, tn := range slices.Sorted(maps.Keys(tenants)) {
		if len(tenants[tn]) > 0 {
			s.own[tn] = map[string]*secret{}
			load("tenants."+tn+".", tenants[tn], s.own[tn])
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if ca == nil && (len(s.server) > 0 || len(s.own) > 0) {
		return nil, errors.New("secrets need a certificate authority")
	}
	return s, nil
}

// CA is the set's certificate authority.
func (s *Set) CA() *CA { return s.ca }

// Hosts are every bound host of every tenant, sorted: what the anchor
// sandboxes trust is constrained to.
func (s *Set) Hosts() []string {
	var out []string
	add := func(m map[string]*secret) {
		for _, sec := range m {
			for _, h := range sec.Hosts {
				if !slices.Contains(out, h) {
					out = append(out, h)
				}
			}
		}
	}
	add(s.server)
	for _, m := range s.own {
		add(m)
	}
	sort.Strings(out)
	return out
}

func (s *Set) lookup(tenant, name string) *secret {
	if sec, ok := s.own[tenant][name]; ok {
		return sec
	}
	return s.server[name]
}

// Names are the secrets tenant may opt in to, sorted.
func (s *Set) Names(tenant string) []string {
	var out []string
	for n := range s.server {
		out = append(out, n)
	}
	for n := range s.own[tenant] {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// UnknownError names secrets a request asked for that its tenant does
// not have.
type UnknownError struct {
	Names []string
	Known []string
}

func (e *UnknownError) Error() string {
	known := "none"
	if len(e.Known) > 0 {
		known = strings.Join(e.Known, ", ")
	}
	return fmt.Sprintf("secrets: %s not declared for this tenant (declared: %s)", strings.Join(e.Names, ", "), known)
}

// maxAsked bounds the names one request may ask for.
const maxAsked = 64

// Resolve checks names against tenant's secrets and returns them sorted,
// without repeats.
func (s *Set) Resolve(tenant string, names []string) ([]string, error) {
	if len(names) > maxAsked {
		return nil, fmt.Errorf("secrets: %d names, at most %d", len(names), maxAsked)
	}
	var out, unknown []string
	for _, n := range names {
		if s.lookup(tenant, n) == nil {
			if len(n) > 64 {
				n = n[:64] + "..."
			}
			unknown = append(unknown, fmt.Sprintf("%q", n))
			continue
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(unknown) > 0 {
		return nil, &UnknownError{Names: unknown, Known: s.Names(tenant)}
	}
	sort.Strings(out)
	return out, nil
}

// Session is the secrets one session opted in to, each with its own
// placeholder.
type Session struct {
	binds []binding
	ca    *CA
}

type binding struct {
	*secret
	placeholder string
}

// PlaceholderPrefix starts every placeholder.
const PlaceholderPrefix = "airlock-secret-"

// NewSession gives names (resolved) of tenant fresh placeholders.
func (s *Set) NewSession(tenant string, names []string) (*Session, error) {
	ss := &Session{ca: s.ca}
	for _, n := range names {
		sec := s.lookup(tenant, n)
		if sec == nil {
			return nil, &UnknownError{Names: []string{n}, Known: s.Names(tenant)}
		}
		var r [16]byte
		rand.Read(r[:])
		ss.binds = append(ss.binds, binding{secret: sec, placeholder: PlaceholderPrefix + hex.EncodeToString(r[:])})
	}
	return ss, nil
}

// Names are the session's secrets.
func (ss *Session) Names() []string {
	out := make([]string, len(ss.binds))
	for i, b := range ss.binds {
		out[i] = b.Name
	}
	return out
}

// Info describes a session's secret for its client: never the value.
type Info struct {
	Name   string   `json:"name"`
	EnvVar string   `json:"env_var"`
	Hosts  []string `json:"hosts"`
}

// Infos describe the session's secrets.
func (ss *Session) Infos() []Info {
	out := make([]Info, len(ss.binds))
	for i, b := range ss.binds {
		out[i] = Info{Name: b.Name, EnvVar: b.EnvVar, Hosts: slices.Clone(b.Hosts)}
	}
	return out
}

// Env are the placeholders, by the variable each is in.
func (ss *Session) Env() map[string]string {
	out := map[string]string{}
	for _, b := range ss.binds {
		out[b.EnvVar] = b.placeholder
	}
	return out
}

// Binds reports whether a secret of the session is bound to host: the
// gate terminates TLS for it and rewrites its requests. plain says
// whether one also may go there in plain HTTP.
func (ss *Session) Binds(host string) (bound, plain bool) {
	if ss == nil {
		return false, false
	}
	for _, b := range ss.binds {
		if slices.Contains(b.Hosts, host) {
			bound = true
			plain = plain || b.PlainHTTP
		}
	}
	return bound, plain
}

// CA is the authority certificates for bound hosts are issued by.
func (ss *Session) CA() *CA { return ss.ca }

// Where a placeholder is found in a request.
type Where int

const (
	InHeader Where = iota
	InQuery
	InBody
)

// Substitute replaces in s the placeholders of the secrets bound to host
// that may go where, at header field (canonical name; InHeader only),
// over TLS or not; it returns the names substituted. A placeholder of
// another secret, or one not allowed there, stays as it is.
func (ss *Session) Substitute(s, host string, where Where, field string, tls bool) (string, []string) {
	if ss == nil || !strings.Contains(s, PlaceholderPrefix) {
		return s, nil
	}
	var used []string
	for _, b := range ss.binds {
		if !strings.Contains(s, b.placeholder) || !b.allows(host, where, field, tls) {
			continue
		}
		v := b.value
		if where == InQuery {
			v = url.QueryEscape(v)
		}
		s = strings.ReplaceAll(s, b.placeholder, v)
		used = append(used, b.Name)
	}
	return s, used
}

// Allows reports whether some secret of the session may be substituted
// where toward host.
func (ss *Session) Allows(host string, where Where, tls bool) bool {
	if ss == nil {
		return false
	}
	for _, b := range ss.binds {
		if b.allows(host, where, "", tls) {
			return true
		}
	}
	return false
}

// Carries reports whether s holds a placeholder of the session.
func (ss *Session) Carries(s []byte) bool {
	for _, b := range ss.binds {
		if strings.Contains(string(s), b.placeholder) {
			return true
		}
	}
	return false
}

func (b binding) allows(host string, where Where, field string, tls bool) bool {
	if !slices.Contains(b.Hosts, host) || (!tls && !b.PlainHTTP) {
		return false
	}
	switch where {
	case InHeader:
		return len(b.Headers) == 0 || field == "" || slices.ContainsFunc(b.Headers, func(h string) bool { return strings.EqualFold(h, field) })
	case InQuery:
		return b.Query
	case InBody:
		return b.Body
	}
	return false
}

// Forms are every form of the session's values (see Forms): what the
// output redaction of the session's results looks for. Only the
// session's own: another tenant's value printed by the session's code is
// that code's own text, and redacting it would confirm a guess of it.
func (ss *Session) Forms() []string {
	if ss == nil {
		return nil
	}
	var out []string
	for _, b := range ss.binds {
		for _, f := range b.forms {
			out = append(out, f.text)
		}
	}
	return out
}

// Substitutions are the pairs a Replacer takes to substitute in a body
// toward host.
func (ss *Session) Substitutions(host string, tls bool) (old, new [][]byte) {
	for _, b := range ss.binds {
		if b.allows(host, InBody, "", tls) {
			old, new = append(old, []byte(b.placeholder)), append(new, []byte(b.value))
		}
	}
	return old, new
}

// Read reads a secret from its file or variable (env is the server's
// environment). The error never holds the value.
func Read(file, name string, env []string) (string, error) {
	if env == nil {
		env = os.Environ()
	}
	var v string
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("cannot read %s: %v", file, errors.Unwrap(err))
		}
		v = strings.TrimRight(string(b), "\r\n")
	} else {
		for _, kv := range env {
			if k, val, ok := strings.Cut(kv, "="); ok && k == name {
				v = val
			}
		}
	}
	switch {
	case v == "":
		return "", fmt.Errorf("the secret (%s) is empty or unset", sourceName(file, name))
	case len(v) < MinValue:
		return "", fmt.Errorf("the secret (%s) is shorter than %d bytes: too short to be kept out of answers reliably", sourceName(file, name), MinValue)
	case strings.ContainsAny(v, "\r\n\x00"):
		return "", fmt.Errorf("the secret (%s) must be one line", sourceName(file, name))
	}
	return v, nil
}

func sourceName(file, env string) string {
	if file != "" {
		return "file " + file
	}
	return "variable " + env
}

// Forms are the ways an answer may echo a secret (see formsOf): as it
// is, URL-escaped, and in base64 at any offset of a larger text, in
// both alphabets.
func Forms(v string) []string {
	fs := formsOf(v)
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.text
	}
	return out
}

// Describe describes the secrets tenant may opt in to, sorted by name.
func (s *Set) Describe(tenant string) []Info {
	var out []Info
	for _, n := range s.Names(tenant) {
		sec := s.lookup(tenant, n)
		out = append(out, Info{Name: n, EnvVar: sec.EnvVar, Hosts: slices.Clone(sec.Hosts)})
	}
	return out
}
