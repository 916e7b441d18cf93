package redact

import (
	"maps"
	"slices"
	"strings"
)

// Names of the built-in rule sets.
const (
	// Credentials: cloud keys (AWS, GCP, Azure), GitHub, Slack and
	// OpenAI-style tokens, JWTs, bearer tokens, PEM private key blocks,
	// and password=/secret=/token=-style pairs.
	Credentials = "credentials"
	// HostPaths: absolute paths under the usual system and home trees
	// (not /workspace, the sandbox's own).
	HostPaths = "host_paths"
	// IPAddresses: IPv4 and IPv6 addresses.
	IPAddresses = "ip_addresses"
)

// Sets lists the built-in rule sets.
func Sets() []string { return slices.Sorted(maps.Keys(builtin)) }

// Set returns the rules of a built-in set.
func Set(name string) ([]Rule, bool) {
	r, ok := builtin[name]
	return slices.Clone(r), ok
}

// Every repetition is bounded (see Check): a stream holds back the
// longest match, which the PEM block sets (about 8K).
const (
	ipv4Octet = `(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])`
	hex4      = `[0-9A-Fa-f]{1,4}`
	// The characters of a path segment.
	seg = `[A-Za-z0-9._@%+=:,~-]{1,64}`
	// A PEM block's body: up to 8000 characters (Go's regexp allows
	// repeats of at most 1000, so eight lazy ones in a row).
	pemChar = `[A-Za-z0-9+/=\s:,.\\-]`
	// What may stand around a key=value pair's value.
	pairValue = `(?P<secret>[^\s"'&;,]{1,256})`
)

var pemBody = strings.Repeat(pemChar+`{0,1000}?`, 8)

var builtin = map[string][]Rule{
	Credentials: {
		{"private_key", `-----BEGIN (?:[A-Z0-9]{1,16} ){0,3}PRIVATE KEY( BLOCK)?-----` + pemBody + `-----END (?:[A-Z0-9]{1,16} ){0,3}PRIVATE KEY( BLOCK)?-----`, []string{"PRIVATE KEY"}, 70, nil},
		{"aws_access_key_id", `\b(?:AKIA|ASIA|ABIA|ACCA|AROA|AIDA)[0-9A-Z]{16}\b`, []string{"AKIA", "ASIA", "ABIA", "ACCA", "AROA", "AIDA"}, 0, nil},
		{"aws_secret_access_key", `(?i)aws_?secret_?(?:access_?)?key["']?\s{0,4}[:=]\s{0,4}["']?(?P<secret>[A-Za-z0-9/+=]{40})\b`, []string{"secret"}, 8, nil},
		{"gcp_api_key", `\bAIza[0-9A-Za-z_-]{35}\b`, []string{"AIza"}, 0, nil},
		{"gcp_oauth_token", `\bya29\.[0-9A-Za-z_-]{20,512}`, []string{"ya29."}, 0, nil},
		{"azure_storage_key", `(?i)AccountKey=(?P<secret>[A-Za-z0-9+/]{86}==)`, []string{"AccountKey="}, 0, nil},
		{"azure_sas_signature", `(?i)\bsig=(?P<secret>[A-Za-z0-9%+/]{40,128}(?:%3D|=){0,2})`, []string{"sig="}, 0, nil},
		{"github_token", `\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b`, []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_"}, 0, nil},
		{"github_pat", `\bgithub_pat_[A-Za-z0-9_]{22,255}\b`, []string{"github_pat_"}, 0, nil},
		{"slack_token", `\bxox[abposre]-[A-Za-z0-9-]{10,250}`, []string{"xox"}, 0, nil},
		{"slack_webhook", `https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9/_-]{20,200}`, []string{"hooks.slack.com"}, 8, nil},
		{"openai_key", `\bsk-(?:proj-|svcacct-|admin-|ant-)?[A-Za-z0-9_-]{20,200}`, []string{"sk-"}, 0, nil},
		{"jwt", `\beyJ[A-Za-z0-9_-]{8,1000}[A-Za-z0-9_-]{0,1000}\.eyJ[A-Za-z0-9_-]{8,1000}[A-Za-z0-9_-]{0,1000}\.[A-Za-z0-9_-]{0,1000}`, []string{"eyJ"}, 0, nil},
		{"bearer_token", `(?i)\bbearer\s{1,4}(?P<secret>[A-Za-z0-9._~+/-]{8,1000}={0,2})`, []string{"bearer"}, 0, nil},
		{"secret_pair", `(?i)\b(?:password|passwd|pwd|secret|client_?secret|token|access_?token|api_?key|access_?key|private_?key)["']?\s{0,4}[:=]\s{0,4}["']?` + pairValue, []string{"pass", "pwd", "secret", "token", "key"}, 10, nil},
	},
	HostPaths: {
		// Not preceded by a word character (\B before /): "a/etc/x" is
		// not a host path, " /etc/x" and "(/etc/x" are.
		{"host_path", `\B/(?:home|root|Users|etc|var|opt|srv|run|mnt|media|proc|sys|usr|tmp|boot|lib|lib64|bin|sbin|dev|nix|snap)(?:/` + seg + `){1,15}/?`, []string{"/home/", "/root/", "/users/", "/etc/", "/var/", "/opt/", "/srv/", "/run/", "/mnt/", "/media/", "/proc/", "/sys/", "/usr/", "/tmp/", "/boot/", "/lib/", "/lib64/", "/bin/", "/sbin/", "/dev/", "/nix/", "/snap/"}, 0, nil},
		{"windows_path", `\b[A-Za-z]:\\(?:[A-Za-z0-9._ -]{1,64}\\){0,15}[A-Za-z0-9._-]{1,64}`, []string{":\\"}, 2, nil},
	},
	IPAddresses: {
		{"ipv4", `\b` + ipv4Octet + `(?:\.` + ipv4Octet + `){3}\b`, []string{"."}, 4, hasDottedQuad},
		// Full; compressed with two groups or more before ::, or one on
		// each side (not "Abc::"), or a leading ::.
		{"ipv6", `\b(?:` + hex4 + `:){7}` + hex4 + `\b|\b(?:` + hex4 + `:){2,6}:(?:` + hex4 + `(?::` + hex4 + `){0,5})?|\b` + hex4 + `::` + hex4 + `(?::` + hex4 + `){0,5}\b|\B::(?:` + hex4 + `(?::` + hex4 + `){0,6})\b`, []string{":"}, 5, hasColonGroup},
	},
}

// The IP rules' shapes (Rule.needs): four digit runs joined by dots, or
// two colons with at most four hex digits between, are not in most output
// though a dot and a colon are; matching a line of output against the IP
// rules took 12 µs, most of a warm execution's redaction. isDigit and
// isHex are the byte classes of those shapes.
func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// hasDottedQuad reports whether b has a digit, a dot, 1 to 3 digits, a
// dot, 1 to 3 digits, a dot and a digit: every IPv4 match does (its
// octets are 1 to 3 ASCII digits).
func hasDottedQuad(b []byte) bool {
	for i := 1; i+1 < len(b); i++ {
		if b[i] != '.' || !isDigit(b[i-1]) {
			continue
		}
		j, ok := i, true
		for range 2 { // the two middle octets, each followed by a dot
			k := j + 1
			for k < len(b) && k-j-1 < 3 && isDigit(b[k]) {
				k++
			}
			if k == j+1 || k >= len(b) || b[k] != '.' {
				ok = false
				break
			}
			j = k
		}
		if ok && j+1 < len(b) && isDigit(b[j+1]) {
			return true
		}
	}
	return false
}

// hasColonGroup reports whether b has two colons with at most 4 hex
// digits between them: every IPv6 match does (a full address has seven
// colons, a compressed one "::").
func hasColonGroup(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != ':' {
			continue
		}
		k := i + 1
		for k < len(b) && k-i-1 < 4 && isHex(b[k]) {
			k++
		}
		if k < len(b) && b[k] == ':' {
			return true
		}
	}
	return false
}
