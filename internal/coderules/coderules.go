// Package coderules owns the operator's advisory code rules: regular
// expressions over submitted code (per language, or for all), each with
// an action: "flag" (the execution runs; the rule's name is recorded in
// its result and the audit log) or "deny" (the execution is refused with
// a 403 naming the rule).
//
// Code rules are a pre-screen, not a security boundary (the jail is):
// code that wants to run something a rule names can build the name at
// run time (getattr(__import__("o"+"s"), ...), base64, eval, a second
// file), and no regular expression over the source sees that. They catch
// accidents and make intent visible. This package must never import
// another airlock package but errdefs, nor run or parse the code.
package coderules

import (
	"errors"
	"fmt"
	"regexp"

	"airlock/internal/errdefs"
)

// Actions.
const (
	Flag = "flag"
	Deny = "deny"
)

// Rule is one code rule.
type Rule struct {
	Name string
	// Language the rule applies to ("python", "bash", "javascript"); ""
	// applies to all.
	Language string
	// Pattern is an RE2 regular expression over the code.
	Pattern string
	Action  string
	// Message, optional, tells the client why (a denial's error says it).
	Message string
}

// Set is compiled rules. A nil *Set has none.
type Set struct {
	rules []rule
}

type rule struct {
	Rule
	re *regexp.Regexp
}

// New compiles rules; nil (and no error) when there are none.
func New(rules []Rule) (*Set, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	s := &Set{}
	var errs []error
	seen := map[string]bool{}
	for _, r := range rules {
		if !validName(r.Name) {
			errs = append(errs, fmt.Errorf("code rule name %q must be 1 to 64 letters, digits, _ or -", r.Name))
		}
		if seen[r.Language+"\x00"+r.Name] {
			errs = append(errs, fmt.Errorf("code rule %q is defined twice for the same language", r.Name))
		}
		seen[r.Language+"\x00"+r.Name] = true
		if r.Action != Flag && r.Action != Deny {
			errs = append(errs, fmt.Errorf("code rule %q: action %q must be \"flag\" or \"deny\"", r.Name, r.Action))
		}
		if len(r.Message) > 256 {
			errs = append(errs, fmt.Errorf("code rule %q: the message is longer than 256 bytes", r.Name))
		}
		re, err := regexp.Compile(r.Pattern)
		if err != nil {
			errs = append(errs, fmt.Errorf("code rule %q: %v", r.Name, err))
			continue
		}
		if r.Pattern == "" || re.MatchString("") {
			errs = append(errs, fmt.Errorf("code rule %q: pattern %q matches any code", r.Name, r.Pattern))
		}
		s.rules = append(s.rules, rule{Rule: r, re: re})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// Join returns a set with a's rules then b's (either may be nil).
func Join(a, b *Set) *Set {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return &Set{rules: append(append([]rule(nil), a.rules...), b.rules...)}
}

// Denied is the error of code a deny rule matched: permission denied
// (403), naming the rule.
type Denied struct {
	Rule    string
	Message string
}

func (d *Denied) Error() string {
	msg := fmt.Sprintf("%v: the operator's code rule %q denies this code", errdefs.ErrPermission, d.Rule)
	if d.Message != "" {
		msg += ": " + d.Message
	}
	return msg
}

func (d *Denied) Unwrap() error { return errdefs.ErrPermission }

// Check matches code of language against the rules: the names of the flag
// rules that match, and a *Denied for the first deny rule that matches
// (checked first: a denied execution has no flags to record).
func (s *Set) Check(language, code string) (flags []string, err error) {
	if s == nil {
		return nil, nil
	}
	for _, r := range s.rules {
		if r.Action == Deny && applies(r, language) && r.re.MatchString(code) {
			return nil, &Denied{Rule: r.Name, Message: r.Message}
		}
	}
	for _, r := range s.rules {
		if r.Action == Flag && applies(r, language) && r.re.MatchString(code) {
			flags = append(flags, r.Name)
		}
	}
	return flags, nil
}

func applies(r rule, language string) bool { return r.Language == "" || r.Language == language }

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
