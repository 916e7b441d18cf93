// Package redact owns output redaction: rules (built-in sets of
// credentials, host paths and IP addresses, and operators' regular
// expressions) compiled into one Redactor that replaces what they match
// in text going back to a caller, whole (a result's stdout, stderr, text
// outputs, error messages) or streamed in chunks. A streamed text is
// redacted exactly as the whole text would be, whatever its chunks: a
// Stream holds back only text where a match may still start — near a
// rule's literal, at most the longest match the rule can make (every
// rule's length is bounded, which New checks) plus one character of
// context.
//
// Redaction is an output policy, not a security boundary: code that
// wants to smuggle a secret out encodes it (base64, reversed, split
// across lines) and no pattern sees it. It hides what code prints by
// accident. This package must never import another airlock package, log
// or keep what it redacted: it returns the count, never the secret.
package redact

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// Rule is one pattern to redact. A match is replaced by
// "[REDACTED:name]"; when the pattern has a group named "secret", only
// that group is (so "password=hunter2" keeps "password=").
type Rule struct {
	Name    string
	Pattern string
	// Literals, when set, are ASCII strings one of which every match
	// contains (compared without case), starting at most Offset bytes
	// after the match's start: a text with none of them is not searched
	// for this rule, and a stream passes on text at once where none can
	// start a match. Without them, a pattern's literal prefix serves.
	Literals []string
	Offset   int
	// needs, when set, is true of every text a match of the rule lies in:
	// a shape every match has, far cheaper to look for than a search
	// (the IP rules' literals, a dot and a colon, are in most output).
	// Only built-in rules have one.
	needs func([]byte) bool
}

// MaxMatch bounds the bytes one rule may match: a stream holds back this
// much, so it bounds how late streamed output arrives.
const MaxMatch = 16 << 10

// MaxRules bounds the rules of one Redactor, built-in ones included.
const MaxRules = 64

// Redactor replaces what its rules match. A nil *Redactor redacts
// nothing (redaction off).
type Redactor struct {
	rules []rule
	// hold: bytes a stream holds back (longest match + one rune).
	hold int

	mu    sync.Mutex
	cache map[uint64]*combo
}

type rule struct {
	name, pattern string
	lits          [][]byte // lower case; nil: always searched
	off           int      // the most bytes from a match's start to its literal
	ascii         bool     // every literal is ASCII (a stream may search them)
	maxLit        int      // the longest literal
	max           int      // the most bytes a match spans
	nsub          int      // its own groups
	secret        int      // its "secret" group among them (0: none)
	// needs is Rule.needs: a text without it is not searched for the
	// rule, as with its literals; it narrows only which rules a search
	// runs.
	needs func([]byte) bool
}

// combo is the rules a text may match, compiled into one alternation:
// Go's regexp finds the leftmost match of any of them in one pass, and
// the rule listed first wins at the same place. Texts without a rule's
// literals leave it out: most texts hold none of the credentials'.
type combo struct {
	re *regexp.Regexp // (r1)|(r2)|...
	// withCtx finds the leftmost match after the first rune of its input
	// (the last rune already passed on: context for \b and ^).
	withCtx *regexp.Regexp
	names   []string
	group   []int // group of each rule
	secret  []int // group of each rule's "secret" (-1: the whole match)
}

// New compiles the built-in sets named and the operator's rules into
// one Redactor; nil (and no error) when there are none.
func New(sets []string, rules []Rule) (*Redactor, error) {
	var all []Rule
	var errs []error
	for _, name := range sets {
		set, ok := builtin[name]
		if !ok {
			errs = append(errs, fmt.Errorf("unknown built-in rule set %q (known: %s)", name, strings.Join(Sets(), ", ")))
			continue
		}
		all = append(all, set...)
	}
	errs = append(errs, checkNames(rules, nil)...)
	return build(nil, append(all, rules...), errs)
}

// With is r with rules added after its own (r nil: rules alone): a
// Redactor of its own, sharing nothing mutable with r, whose rules are
// not compiled again. nil (and no error) when there are none.
func (r *Redactor) With(rules []Rule) (*Redactor, error) {
	return build(r, rules, checkNames(rules, r.Rules()))
}

// checkNames checks the names of rules: valid, and not used twice
// among them or taken.
func checkNames(rules []Rule, taken []string) []error {
	var errs []error
	seen := map[string]bool{}
	for _, n := range taken {
		seen[n] = true
	}
	for _, r := range rules {
		if !validName(r.Name) {
			errs = append(errs, fmt.Errorf("rule name %q must be 1 to 64 letters, digits, _ or -", r.Name))
		}
		if seen[r.Name] {
			errs = append(errs, fmt.Errorf("rule name %q is used twice", r.Name))
		}
		seen[r.Name] = true
	}
	return errs
}

// build compiles rules after base's (nil: none), unless errs.
func build(base *Redactor, rules []Rule, errs []error) (*Redactor, error) {
	n := len(rules)
	if base != nil {
		n += len(base.rules)
	}
	if n > MaxRules {
		errs = append(errs, fmt.Errorf("%d rules: at most %d, the built-in sets' included", n, MaxRules))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	rd := &Redactor{cache: map[uint64]*combo{}}
	if base != nil {
		rd.rules, rd.hold = slices.Clone(base.rules), base.hold
	}
	for _, x := range rules {
		c, err := compile(x)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %q: %v", x.Name, err))
			continue
		}
		rd.rules = append(rd.rules, c)
		rd.hold = max(rd.hold, c.max+utf8.UTFMax)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rd, nil
}

// compile checks one rule and works out what searching for it needs.
func compile(r Rule) (rule, error) {
	re, n, err := check(r.Pattern)
	if err != nil {
		return rule{}, err
	}
	c := rule{name: r.Name, pattern: r.Pattern, nsub: re.NumSubexp(), secret: max(re.SubexpIndex("secret"), 0), max: n, off: r.Offset, ascii: true, needs: r.needs}
	lits := r.Literals
	if prefix, _ := re.LiteralPrefix(); len(lits) == 0 && prefix != "" && !strings.HasPrefix(r.Pattern, "(?i)") {
		lits = []string{prefix}
	}
	for _, l := range lits {
		c.lits = append(c.lits, bytes.ToLower([]byte(l)))
		c.maxLit = max(c.maxLit, len(l))
		for i := 0; i < len(l); i++ {
			c.ascii = c.ascii && l[i] < utf8.RuneSelf
		}
	}
	return c, nil
}

// fold is text in lower case with the two non-ASCII letters that (?i)
// matches as ASCII ones (the Kelvin sign as k, the long s as s) folded
// too: a literal's absence must mean the rule cannot match, or a
// streamed text and the whole one could be redacted differently.
func fold(text []byte) []byte {
	lower := bytes.ToLower(text) // K (U+212A) becomes k
	if bytes.Contains(lower, longS) {
		lower = bytes.ReplaceAll(lower, longS, []byte("s"))
	}
	return lower
}

var longS = []byte("\u017f")

// earliest is where in w the first match may start that w does not
// settle yet: a rule's match is settled once its longest match and a
// rune of context fit after its start, or earlier where none of its
// literals (nor the start of one, at the end) lies close enough after.
func (r *Redactor) earliest(w []byte) int {
	n := len(w)
	e := n
	for _, c := range r.rules {
		lo := max(n-c.max-utf8.UTFMax, 0)
		at := lo
		if c.lits != nil && c.ascii {
			// A literal in w, or begun at its end, or still to come.
			at = n - c.off
			for _, l := range c.lits {
				if q := indexFold(w[lo:], l); q >= 0 {
					at = min(at, lo+q-c.off)
				}
			}
			at = max(at, lo)
		}
		e = min(e, at)
	}
	return max(e, 0)
}

var kelvin = []byte("\u212a")

// indexFold is the first place in s where lit (lower-case ASCII) is, or
// begins and s ends, compared as (?i) does: ASCII case, and the Kelvin
// sign and long s as k and s. -1 if nowhere.
func indexFold(s, lit []byte) int {
	c := lit[0]
	up := c
	if 'a' <= c && c <= 'z' {
		up = c - 'a' + 'A'
	}
	for i, b := range s {
		// The first byte, quickly: the letter, its capital, or the lead
		// byte of a sign (and of a character the end cut).
		if b != c && b != up && b < utf8.RuneSelf {
			continue
		}
		if foldAt(s, i, lit) {
			return i
		}
	}
	return -1
}

// foldAt reports whether lit is at s[i:], or its beginning is and s ends
// (a sign cut in two by the end counts as begun).
func foldAt(s []byte, i int, lit []byte) bool {
	for _, c := range lit {
		if i >= len(s) {
			return true // s ended inside the literal
		}
		if len(s)-i < utf8.UTFMax && !utf8.FullRune(s[i:]) {
			return true // a character cut by the end: it may be a Kelvin sign or a long s
		}
		b := s[i]
		switch {
		case b < utf8.RuneSelf:
			if 'A' <= b && b <= 'Z' {
				b += 'a' - 'A'
			}
			if b != c {
				return false
			}
			i++
		case c == 'k' && bytes.HasPrefix(s[i:], kelvin):
			i += len(kelvin)
		case c == 's' && bytes.HasPrefix(s[i:], longS):
			i += len(longS)
		default:
			return false
		}
	}
	return true
}

// combo is the alternation of the rules text may match; nil if none may.
func (r *Redactor) combo(text []byte) *combo {
	var lower []byte
	var mask uint64
	for i, c := range r.rules {
		if c.needs != nil && !c.needs(text) {
			continue
		}
		if c.lits == nil {
			mask |= 1 << i
			continue
		}
		if lower == nil {
			lower = fold(text)
		}
		for _, l := range c.lits {
			if bytes.Contains(lower, l) {
				mask |= 1 << i
				break
			}
		}
	}
	if mask == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.cache[mask]; c != nil {
		return c
	}
	c := &combo{}
	var alt []string
	group := 1
	for i, rl := range r.rules {
		if mask&(1<<i) == 0 {
			continue
		}
		c.names = append(c.names, rl.name)
		c.group = append(c.group, group)
		secret := -1
		if rl.secret > 0 {
			secret = group + rl.secret
		}
		c.secret = append(c.secret, secret)
		group += 1 + rl.nsub
		alt = append(alt, "("+rl.pattern+")")
	}
	all := strings.Join(alt, "|")
	c.re = regexp.MustCompile(all)
	c.withCtx = regexp.MustCompile(`^(?s:.)(?s:.*?)(?:` + all + `)`)
	if len(r.cache) < 1024 {
		r.cache[mask] = c
	}
	return c
}

// Check compiles pattern as a rule and returns the most bytes it can
// match. A rule must match at least one byte, and at most MaxMatch: no
// unbounded repetition (*, +, {n,}), write {0,N} or {1,N} instead.
func Check(pattern string) (int, error) {
	_, n, err := check(pattern)
	return n, err
}

// check is Check, with the pattern compiled: a set's patterns take
// milliseconds each to compile, so a rule is compiled once.
func check(pattern string) (*regexp.Regexp, int, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, 0, err
	}
	p, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, 0, err
	}
	p = p.Simplify()
	hi, ok := maxLen(p)
	if !ok || hi > MaxMatch {
		return nil, 0, fmt.Errorf("pattern %q can match more than %d bytes: bound every repetition (write {1,64}, not + or *)", pattern, MaxMatch)
	}
	if minLen(p) == 0 {
		return nil, 0, fmt.Errorf("pattern %q can match the empty string", pattern)
	}
	return re, hi, nil
}

// maxLen is the most bytes re can match; false if unbounded (or beyond
// any sane bound).
func maxLen(re *syntax.Regexp) (int, bool) {
	const huge = 1 << 30
	switch re.Op {
	case syntax.OpNoMatch, syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return 0, true
	case syntax.OpLiteral:
		n := 0
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				n += utf8.UTFMax // a case fold may change the width (k, K and the Kelvin sign)
			} else {
				n += runeLen(r)
			}
		}
		return n, true
	case syntax.OpCharClass:
		if len(re.Rune) == 0 {
			return 0, true
		}
		return runeLen(re.Rune[len(re.Rune)-1]), true
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		return utf8.UTFMax, true
	case syntax.OpCapture, syntax.OpQuest:
		return maxLen(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		return 0, false
	case syntax.OpRepeat:
		if re.Max < 0 {
			return 0, false
		}
		n, ok := maxLen(re.Sub[0])
		return n * re.Max, ok && n*re.Max < huge
	case syntax.OpConcat:
		sum := 0
		for _, s := range re.Sub {
			n, ok := maxLen(s)
			if !ok {
				return 0, false
			}
			sum += n
			if sum > huge {
				return 0, false
			}
		}
		return sum, true
	case syntax.OpAlternate:
		hi := 0
		for _, s := range re.Sub {
			n, ok := maxLen(s)
			if !ok {
				return 0, false
			}
			hi = max(hi, n)
		}
		return hi, true
	}
	return 0, false
}

// runeLen is the width of r in UTF-8; an invalid rune matches one byte
// of invalid input, or up to UTFMax for the replacement character.
func runeLen(r rune) int {
	if n := utf8.RuneLen(r); n > 0 {
		return n
	}
	return utf8.UTFMax
}

// minLen is the fewest bytes re can match.
func minLen(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		return len(re.Rune) // at least a byte a rune
	case syntax.OpCharClass, syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		return 1
	case syntax.OpCapture, syntax.OpPlus:
		return minLen(re.Sub[0])
	case syntax.OpRepeat:
		return re.Min * minLen(re.Sub[0])
	case syntax.OpConcat:
		sum := 0
		for _, s := range re.Sub {
			sum += minLen(s)
		}
		return sum
	case syntax.OpAlternate:
		lo := -1
		for _, s := range re.Sub {
			if n := minLen(s); lo < 0 || n < lo {
				lo = n
			}
		}
		return max(lo, 0)
	case syntax.OpNoMatch:
		return 1 // never matches: not empty either
	}
	return 0
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Rules are the names of the rules, in order (built-in sets first).
func (r *Redactor) Rules() []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, c := range r.rules {
		out = append(out, c.name)
	}
	return out
}

// Hold is how many bytes a Stream holds back at most (0 for nil).
func (r *Redactor) Hold() int {
	if r == nil {
		return 0
	}
	return r.hold
}

// String redacts s and says how many matches it replaced.
func (r *Redactor) String(s string) (string, int) {
	if r == nil || s == "" {
		return s, 0
	}
	b, n := r.Bytes([]byte(s))
	if n == 0 {
		return s, 0
	}
	return string(b), n
}

// Bytes redacts b (into a new slice when anything matched) and says how
// many matches it replaced.
func (r *Redactor) Bytes(b []byte) ([]byte, int) {
	if r == nil {
		return b, 0
	}
	c := r.combo(b)
	if c == nil {
		return b, 0
	}
	ms := c.re.FindAllSubmatchIndex(b, -1)
	if len(ms) == 0 {
		return b, 0
	}
	out := make([]byte, 0, len(b))
	at := 0
	for _, m := range ms {
		out = c.replace(out, b, at, m)
		at = m[1]
	}
	return append(out, b[at:]...), len(ms)
}

// replace appends b[at:] up to the end of match m, with the match (or its
// secret group) replaced.
func (r *combo) replace(out, b []byte, at int, m []int) []byte {
	for i, g := range r.group {
		if m[2*g] < 0 {
			continue
		}
		from, to := m[0], m[1]
		if s := r.secret[i]; s > 0 && m[2*s] >= 0 {
			from, to = m[2*s], m[2*s+1]
		}
		out = append(out, b[at:from]...)
		out = append(out, "[REDACTED:"+r.names[i]+"]"...)
		return append(out, b[to:m[1]]...)
	}
	return append(out, b[at:m[1]]...) // unreachable: some group matched
}
