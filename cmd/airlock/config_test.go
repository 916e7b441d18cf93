package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"airlock/internal/config"
	"airlock/internal/mcp"
	"airlock/internal/server"
)

// withEnv makes env the environment the commands' configuration reads.
func withEnv(t *testing.T, env ...string) {
	t.Helper()
	old := environ
	environ = func() []string { return env }
	t.Cleanup(func() { environ = old })
}

// serveConfig runs airlock serve with args and returns its exit status,
// its stderr and the configuration it would have served with.
func serveConfig(t *testing.T, args ...string) (int, string, *config.Config) {
	t.Helper()
	var got *config.Config
	old := runServer
	runServer = func(_ context.Context, cfg config.Config, _ server.Options) error {
		got = &cfg
		return nil
	}
	t.Cleanup(func() { runServer = old })
	var stderr bytes.Buffer
	code := serveCmd(args, &stderr)
	return code, stderr.String(), got
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "airlock.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every flag that sets a configuration key goes through the same
// validation as the file and the environment: `serve --listen 0.0.0.0:P`
// with auth "none" (from the file or AIRLOCK_SERVER_AUTH) is refused like
// the same listen address in the file or the environment, and each flag
// lands on its key, over the file and the environment.
func TestFlagsAreValidatedLikeTheirKeys(t *testing.T) {
	noAuth := writeConfig(t, `{"server": {"auth": "none"}}`)
	noAuthWide := writeConfig(t, `{"server": {"auth": "none", "listen": "0.0.0.0:8080"}}`)
	wideKeys := writeConfig(t, `{"server": {"listen": "127.0.0.3:8080"}, "log": {"level": "warn"}}`)
	type check func(*config.Config) bool
	for _, c := range []struct {
		name string
		flag string // the key flag the case is about ("serve --listen"), "" for none
		env  []string
		args []string
		// ok: served with a configuration that passes check; else exit 78
		// with want in stderr.
		ok    check
		wants []string
	}{
		{name: "flag over a file without auth", flag: "serve --listen", args: []string{"--config", noAuth, "--listen", "0.0.0.0:8999"},
			wants: []string{`server.auth "none" is allowed only on a loopback listen address, not "0.0.0.0:8999"`}},
		{name: "flag over the environment without auth", flag: "serve --listen", env: []string{"AIRLOCK_SERVER_AUTH=none"}, args: []string{"--listen", "[::]:8999"},
			wants: []string{`server.auth "none"`, `"[::]:8999"`}},
		{name: "flag with an empty host", flag: "serve --listen", env: []string{"AIRLOCK_SERVER_AUTH=none"}, args: []string{"--listen=:8999"},
			wants: []string{`server.auth "none"`}},
		{name: "the file alone", args: []string{"--config", noAuthWide}, wants: []string{`server.auth "none"`}},
		{name: "the environment alone", env: []string{"AIRLOCK_SERVER_AUTH=none", "AIRLOCK_SERVER_LISTEN=0.0.0.0:8999"}, wants: []string{`server.auth "none"`}},
		{name: "flag without a port", flag: "serve --listen", args: []string{"--listen", "localhost"}, wants: []string{`server.listen "localhost" must be host:port`}},
		{name: "flag emptied", flag: "serve --listen", args: []string{"--listen="}, wants: []string{`server.listen "" must be host:port`}},
		{name: "flag on loopback without auth", flag: "serve --listen", args: []string{"--config", noAuth, "--listen", "127.0.0.1:8999"},
			ok: func(c *config.Config) bool { return c.Server.Listen == "127.0.0.1:8999" && c.Server.Auth == "none" }},
		{name: "flag over file and environment", flag: "serve --listen", env: []string{"AIRLOCK_SERVER_LISTEN=127.0.0.2:1"}, args: []string{"--config", wideKeys, "--listen", "0.0.0.0:8999"},
			ok: func(c *config.Config) bool { return c.Server.Listen == "0.0.0.0:8999" && c.Server.Auth == "keys" }},
		{name: "-v", flag: "serve -v", args: []string{"--config", wideKeys, "-v"},
			ok: func(c *config.Config) bool { return c.Log.Level == "debug" && c.Server.Listen == "127.0.0.3:8080" }},
		{name: "-v=false", flag: "serve -v", args: []string{"--config", wideKeys, "-v=false"},
			ok: func(c *config.Config) bool { return c.Log.Level == "warn" }},
		{name: "-v and a bad file", flag: "serve -v", args: []string{"--config", writeConfig(t, `{"log": {"levl": "x"}}`), "-v"},
			wants: []string{"unknown configuration key log.levl"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			withEnv(t, c.env...)
			code, stderr, got := serveConfig(t, c.args...)
			if c.ok != nil {
				if code != 0 || got == nil || !c.ok(got) {
					t.Fatalf("exit %d, served with %+v; stderr %s", code, got, stderr)
				}
				return
			}
			if code != exitConfig || got != nil {
				t.Fatalf("exit %d (want %d), served: %v; stderr %s", code, exitConfig, got != nil, stderr)
			}
			for _, w := range c.wants {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not say %q", stderr, w)
				}
			}
			if strings.Contains(stderr, "invalid argument") {
				t.Errorf("stderr %q speaks of invalid arguments, not of the configuration", stderr)
			}
		})
	}
}

// airlock mcp --content sets mcp.content, over the file and the
// environment, and is validated with them.
func TestMCPContentFlag(t *testing.T) {
	file := writeConfig(t, `{"mcp": {"content": ["resource"]}}`)
	for _, c := range []struct {
		env  []string
		args []string
		want []string // nil: refused
	}{
		{nil, []string{"--content", "image,resource_link"}, []string{"image", "resource_link"}},
		{[]string{"AIRLOCK_MCP_CONTENT=resource"}, []string{"--config", file, "--content", "image"}, []string{"image"}},
		{nil, []string{"--config", file}, []string{"resource"}},
		{[]string{"AIRLOCK_MCP_CONTENT=image"}, nil, []string{"image"}},
		{nil, nil, []string{}},
		{nil, []string{"--content", "images"}, nil},
		{[]string{"AIRLOCK_MCP_CONTENT=video"}, nil, nil},
	} {
		withEnv(t, c.env...)
		var got *config.Config
		old := runMCP
		runMCP = func(_ context.Context, cfg config.Config, _ server.Options) error {
			got = &cfg
			return nil
		}
		var stderr bytes.Buffer
		code := mcpCmd(c.args, &stderr)
		runMCP = old
		switch {
		case c.want == nil:
			if code != exitConfig || got != nil || !strings.Contains(stderr.String(), "mcp.content") {
				t.Errorf("%v %v: exit %d, ran %v: %s", c.env, c.args, code, got != nil, stderr.String())
			}
		case code != 0 || got == nil || strings.Join(got.MCP.Content, ",") != strings.Join(c.want, ","):
			t.Errorf("%v %v: exit %d, %+v: %s", c.env, c.args, code, got, stderr.String())
		}
	}
}

// Every flag that sets a key has its cases above: a new one cannot skip
// validation unnoticed.
func TestEveryKeyFlagIsTested(t *testing.T) {
	tested := map[string]bool{"serve --listen": true, "serve -v": true, "mcp --content": true}
	for _, cmd := range []func() int{
		func() int { return serveCmd([]string{"-h"}, io.Discard) },
		func() int { return runCmd([]string{"-h"}, nil, io.Discard, io.Discard) },
		func() int { return doctorCmd([]string{"-h"}, io.Discard, io.Discard) },
		func() int { return mcpCmd([]string{"-h"}, io.Discard) },
		func() int { return benchCmd([]string{"-h"}, io.Discard, io.Discard) },
		func() int { return auditCmd([]string{"-h"}, io.Discard, io.Discard) },
		func() int { return configCmd([]string{"print", "-h"}, io.Discard, io.Discard) },
	} {
		cmd()
	}
	for _, sub := range []string{"create", "list", "revoke", "quota"} {
		keysCmd([]string{sub, "-h"}, io.Discard, io.Discard)
	}
	var names []string
	for name := range keyFlags {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !tested[name] {
			t.Errorf("%s sets %s: add its cases to TestFlagsAreValidatedLikeTheirKeys", name, keyFlags[name])
		}
	}
	if len(names) == 0 {
		t.Error("no key flags registered")
	}
}

// A configuration error names the full key and where it was set, once as
// a configuration error (never "invalid argument: invalid argument"),
// and exits 78; so does an AIRLOCK_ variable that names no key.
func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, c := range []struct {
		name, file string
		env        []string
		want       string
	}{
		{"unknown key", `{"server": {"listn": "x"}}`, nil, "unknown configuration key server.listn"},
		{"unknown nested key", `{"tenants": {"a": {"redaction": {"rulez": []}}}}`, nil, "unknown configuration key tenants.a.redaction.rulez"},
		{"unknown key in a list", `{"code_rules": [{"name": "n", "pattern": "p", "action": "flag", "actoin": "x"}]}`, nil, "unknown configuration key code_rules[0].actoin"},
		{"bad size", `{"max": {"memory": "lots"}}`, nil, `max.memory: size "lots"`},
		{"wrong type", `{"server": {"max_sessions": "many"}}`, nil, "server.max_sessions: want a whole number, not a string"},
		{"wrong type in a map", `{"pool": {"size": {"python": true}}}`, nil, "pool.size.python: want a whole number, not a boolean"},
		{"section not an object", `{"server": 5}`, nil, "server: want an object, not a number"},
		{"not JSON", `{"server": `, nil, "not valid JSON"},
		{"invalid value", `{"defaults": {"memory": "100G"}}`, nil, "defaults: memory 100G exceeds the server maximum 8G"},
		{"bad pattern", `{"redaction": {"rules": [{"name": "x", "pattern": "("}]}}`, nil, `redaction: rule "x"`},
		{"bad tenant's code rule", `{"tenants": {"a": {"code_rules": [{"name": "x", "pattern": "b", "action": "block"}]}}}`, nil, `tenants.a.code_rules: code rule "x"`},
		{"unknown variable", "", []string{"AIRLOCK_SERVER_LISTN=127.0.0.1:1"}, "AIRLOCK_SERVER_LISTN: names no configuration key"},
		{"bad variable", "", []string{"AIRLOCK_DEFAULTS_MEMORY=lots"}, `AIRLOCK_DEFAULTS_MEMORY: defaults.memory: size "lots"`},
		{"unknown key in a variable's section", "", []string{`AIRLOCK_QUOTAS={"max_sesions": 1}`}, "AIRLOCK_QUOTAS: unknown configuration key quotas.max_sesions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			withEnv(t, c.env...)
			args := []string{"print"}
			if c.file != "" {
				args = append(args, "--config", writeConfig(t, c.file))
			}
			var stderr bytes.Buffer
			if code := configCmd(args, io.Discard, &stderr); code != exitConfig {
				t.Errorf("exit %d, want %d", code, exitConfig)
			}
			if !strings.Contains(stderr.String(), c.want) {
				t.Errorf("stderr %q does not say %q", stderr.String(), c.want)
			}
			if strings.Contains(stderr.String(), "invalid argument") || strings.Count(stderr.String(), "invalid configuration") != 1 {
				t.Errorf("stderr %q: want one \"invalid configuration\" and no \"invalid argument\"", stderr.String())
			}
		})
	}
	// Variables that are not keys but airlock's or its clients' own pass.
	withEnv(t, "AIRLOCK_CONFIG=", "AIRLOCK_URL=http://x", "AIRLOCK_TOKEN=t", "AIRLOCK_TRACE=1", "AIRLOCK_TEST_STRICT=1", "NOT_AIRLOCK_X=1")
	var stderr bytes.Buffer
	if code := configCmd([]string{"print"}, io.Discard, &stderr); code != 0 {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
}

// `airlock audit --kind` with a kind no record has is an error listing the
// valid ones (before any database is opened), not an empty listing.
func TestAuditKindIsChecked(t *testing.T) {
	withEnv(t, "AIRLOCK_DATA_DIR="+t.TempDir())
	var stderr bytes.Buffer
	if code := auditCmd([]string{"--kind", "executions"}, io.Discard, &stderr); code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	for _, want := range []string{`"executions"`, "execution", "session.create", "file"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q does not name %s", stderr.String(), want)
		}
	}
}

// airlock mcp --url takes --content too, checked like mcp.content and
// sent to the server as ?content=; a key file goes with --url only.
func TestMCPBridgeFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		url  string
	}{
		{[]string{"--url", "http://h:8080/mcp"}, 0, "http://h:8080/mcp"},
		{[]string{"--url", "http://h:8080"}, 0, "http://h:8080/mcp"},
		{[]string{"--url", "https://h/mcp", "--content", "image,resource_link"}, 0, "https://h/mcp?content=image%2Cresource_link"},
		{[]string{"--url", "https://h/mcp", "--content", "images"}, exitConfig, ""},
		{[]string{"--url", "ftp://h/mcp"}, exitUsage, ""},
		{[]string{"--key-file", "/dev/null"}, exitUsage, ""},
	} {
		var got string
		old := runBridge
		runBridge = func(_ context.Context, o mcp.BridgeOptions) error {
			got = o.URL
			return nil
		}
		var stderr bytes.Buffer
		code := mcpCmd(c.args, &stderr)
		runBridge = old
		if code != c.code || got != c.url {
			t.Errorf("%v: exit %d, relayed to %q; want %d, %q: %s", c.args, code, got, c.code, c.url, stderr.String())
		}
	}
}
