package broker

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// A template is text with {name} where an argument's value goes. It is
// parsed once, when the server starts; expanding it never reparses what
// a value holds, so a value cannot add a placeholder, a path segment, a
// query parameter or a header: every value is escaped for where it goes,
// and its characters are checked first (see checkValue).

// piece is a literal (name empty) or a placeholder.
type piece struct {
	lit, name string
}

// parsePieces splits s into literals and {name} placeholders. "{" and
// "}" appear nowhere else.
func parsePieces(s string) ([]piece, error) {
	var out []piece
	for s != "" {
		i := strings.IndexAny(s, "{}")
		if i < 0 {
			out = append(out, piece{lit: s})
			break
		}
		if s[i] == '}' {
			return nil, errors.New("a '}' with no '{' before it")
		}
		if i > 0 {
			out = append(out, piece{lit: s[:i]})
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return nil, errors.New("a '{' with no '}' after it")
		}
		name := s[i+1 : i+j]
		if !validArgName(name) {
			return nil, fmt.Errorf("{%s} is not a placeholder: a letter or '_', then letters, digits and '_'", name)
		}
		out = append(out, piece{name: name})
		s = s[i+j+1:]
	}
	return out, nil
}

func validArgName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// names are the placeholders of pieces.
func names(ps []piece) []string {
	var out []string
	for _, p := range ps {
		if p.name != "" {
			out = append(out, p.name)
		}
	}
	return out
}

// wholeName is the placeholder that is all of ps ("" if none is).
func wholeName(ps []piece) string {
	if len(ps) == 1 {
		return ps[0].name
	}
	return ""
}

// ValueError is an argument's value that a template refuses: Field is
// the argument, Rule what it broke.
type ValueError struct {
	Field, Rule, Msg string
}

func (e *ValueError) Error() string { return e.Field + ": " + e.Msg }

// checkValue refuses a value with characters no template takes: control
// characters (CR and LF above all: a header or a request line split in
// two), and invalid UTF-8.
func checkValue(field, v string) error {
	if !validUTF8(v) {
		return &ValueError{field, "encoding", "the value is not valid UTF-8"}
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return &ValueError{field, "control_characters", fmt.Sprintf("the value holds a control character (byte 0x%02x at %d): tools take none", c, i)}
		}
	}
	return nil
}

// text is an argument's value as a template writes it: strings as they
// are, numbers without exponent when they are whole, booleans as
// true/false. ok is false for null, arrays and objects.
func text(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case bool:
		return strconv.FormatBool(v), true
	case float64:
		if v == float64(int64(v)) && v > -1<<53 && v < 1<<53 {
			return strconv.FormatInt(int64(v), 10), true
		}
		return strconv.FormatFloat(v, 'g', -1, 64), true
	}
	return "", false
}

// urlTemplate is an HTTP tool's URL: a fixed origin, a path and a query
// with placeholders.
type urlTemplate struct {
	origin string // scheme://host[:port], no placeholder
	scheme string
	host   string // host[:port] as url.URL.Host
	path   [][]piece
	query  []queryParam
}

type queryParam struct {
	key string
	val []piece
}

// parseURL parses an HTTP tool's URL template.
func parseURL(s string) (*urlTemplate, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return nil, errors.New("it must start with http:// or https://")
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority := rest[:end]
	if strings.ContainsAny(authority, "{}") {
		return nil, errors.New("no argument may be part of the scheme, host or port")
	}
	if strings.Contains(authority, "@") {
		return nil, errors.New("credentials in the URL are not allowed: declare a credential (file or env)")
	}
	u, err := url.Parse(scheme + "://" + authority)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("%q has no host", authority)
	}
	t := &urlTemplate{origin: scheme + "://" + authority, scheme: scheme, host: u.Host}
	rest = rest[end:]
	if strings.Contains(rest, "#") {
		return nil, errors.New("a fragment (#) is never sent: leave it out")
	}
	path, query, hasQuery := strings.Cut(rest, "?")
	if path == "" {
		path = "/"
	}
	for _, seg := range strings.Split(path[1:], "/") {
		ps, err := parsePieces(seg)
		if err != nil {
			return nil, fmt.Errorf("path: %v", err)
		}
		for _, p := range ps {
			if p.lit != "" && (strings.ContainsAny(p.lit, " \"<>\\^`|") || hasCtl(p.lit)) {
				return nil, fmt.Errorf("path: %q must be written URL-escaped", p.lit)
			}
		}
		if len(ps) == 1 && (ps[0].lit == "." || ps[0].lit == "..") {
			return nil, errors.New("path: no \".\" or \"..\" segments")
		}
		t.path = append(t.path, ps)
	}
	if hasQuery {
		for _, kv := range strings.Split(query, "&") {
			if kv == "" {
				continue
			}
			k, v, _ := strings.Cut(kv, "=")
			if strings.ContainsAny(k, "{}") || k == "" {
				return nil, fmt.Errorf("query: %q: arguments go in values only, after a fixed name", kv)
			}
			ps, err := parsePieces(v)
			if err != nil {
				return nil, fmt.Errorf("query %s: %v", k, err)
			}
			if strings.ContainsAny(k+v, " \"<>\\^`|#") || hasCtl(k+v) {
				return nil, fmt.Errorf("query: %q must be written URL-escaped", kv)
			}
			t.query = append(t.query, queryParam{key: k, val: ps})
		}
	}
	// The operator's own text must be a URL already (a stray "%" is
	// not): expanded with plain values, it must keep its origin.
	dummy := map[string]any{}
	for _, n := range append(t.pathNames(), t.queryNames()...) {
		dummy[n] = "x"
	}
	if _, err := t.expand(dummy); err != nil {
		return nil, errors.New("it is not a valid URL (write reserved characters escaped, as %XX)")
	}
	return t, nil
}

func hasCtl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return true
		}
	}
	return false
}

// pathNames and queryNames are the template's placeholders by place.
func (t *urlTemplate) pathNames() []string {
	var out []string
	for _, seg := range t.path {
		out = append(out, names(seg)...)
	}
	return out
}

func (t *urlTemplate) queryNames() []string {
	var out []string
	for _, q := range t.query {
		out = append(out, names(q.val)...)
	}
	return out
}

// expand writes the URL for args. A path placeholder's value is one
// escaped segment, never "", "." or ".."; a query parameter whose
// placeholder has no value is left out. The result is parsed again and
// must have the template's origin (a check on this code, not on args).
func (t *urlTemplate) expand(args map[string]any) (string, error) {
	var b strings.Builder
	b.WriteString(t.origin)
	for _, seg := range t.path {
		b.WriteByte('/')
		start := b.Len()
		for _, p := range seg {
			if p.name == "" {
				b.WriteString(p.lit)
				continue
			}
			v, ok := text(args[p.name])
			if !ok {
				return "", &ValueError{p.name, "required", "the URL's path needs this argument"}
			}
			if err := checkValue(p.name, v); err != nil {
				return "", err
			}
			b.WriteString(url.PathEscape(v))
		}
		if s := b.String()[start:]; s == "" && len(seg) > 0 || s == "." || s == ".." {
			return "", &ValueError{names(seg)[0], "path_segment", "the value would make an empty, \".\" or \"..\" path segment"}
		}
	}
	sep := byte('?')
	for _, q := range t.query {
		var val strings.Builder
		missing := false
		for _, p := range q.val {
			if p.name == "" {
				val.WriteString(p.lit)
				continue
			}
			v, ok := text(args[p.name])
			if !ok {
				missing = true
				break
			}
			if err := checkValue(p.name, v); err != nil {
				return "", err
			}
			val.WriteString(url.QueryEscape(v))
		}
		if missing {
			continue
		}
		b.WriteByte(sep)
		sep = '&'
		b.WriteString(q.key)
		if len(q.val) > 0 {
			b.WriteByte('=')
			b.WriteString(val.String())
		}
	}
	out := b.String()
	u, err := url.Parse(out)
	if err != nil || u.Scheme != t.scheme || u.Host != t.host || u.User != nil || u.Fragment != "" {
		return "", fmt.Errorf("broker: the expanded URL does not keep the template's origin %s", t.origin)
	}
	return out, nil
}

// argvTemplate is a command tool's argv.
type argvTemplate struct {
	args [][]piece
	// dashes[i]: an earlier element is "--", so element i may start
	// with "-".
	dashes []bool
}

func parseArgv(argv []string) (*argvTemplate, error) {
	t := &argvTemplate{}
	seen := false
	for i, a := range argv {
		if strings.ContainsFunc(a, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, fmt.Errorf("argv[%d] holds a control character", i)
		}
		ps, err := parsePieces(a)
		if err != nil {
			return nil, fmt.Errorf("argv[%d]: %v", i, err)
		}
		t.args = append(t.args, ps)
		t.dashes = append(t.dashes, seen)
		if a == "--" {
			seen = true
		}
	}
	return t, nil
}

func (t *argvTemplate) names() []string {
	var out []string
	for _, ps := range t.args {
		out = append(out, names(ps)...)
	}
	return out
}

// expand writes the argv for args. An element that is only a
// placeholder is left out when the argument is absent. An element whose
// template starts with a placeholder may not come out starting with "-"
// (an option the operator never declared) unless a "--" came before it.
func (t *argvTemplate) expand(args map[string]any) ([]string, error) {
	var out []string
	for i, ps := range t.args {
		var b strings.Builder
		skip := false
		for _, p := range ps {
			if p.name == "" {
				b.WriteString(p.lit)
				continue
			}
			v, ok := text(args[p.name])
			if !ok {
				if wholeName(ps) != "" {
					skip = true
					break
				}
				return nil, &ValueError{p.name, "required", "the command needs this argument"}
			}
			if err := checkValue(p.name, v); err != nil {
				return nil, err
			}
			// The element's start is built from arguments so far (no
			// literal yet): a value that makes it an option is refused,
			// whether the element is "{a}", "{a}..HEAD" or "{a}{b}".
			if b.Len() == 0 && strings.HasPrefix(v, "-") && !t.dashes[i] {
				return nil, &ValueError{p.name, "leading_dash", "the value may not start with \"-\": it begins a command-line element, which the command would read as an option"}
			}
			b.WriteString(v)
		}
		if !skip {
			out = append(out, b.String())
		}
	}
	return out, nil
}
