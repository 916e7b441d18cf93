package config

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestToolsValidate(t *testing.T) {
	obj := json.RawMessage(`{"type":"object"}`)
	good := Tool{Arguments: obj, HTTP: &HTTPTool{URL: "https://api.example.com/v1"}, Credential: &Credential{Env: "TOKEN"}}
	with := func(f func(*Tool)) func(*Config) {
		return func(c *Config) {
			t := good
			h, cr := *good.HTTP, *good.Credential
			t.HTTP, t.Credential = &h, &cr
			f(&t)
			c.Tools = map[string]Tool{"search": t}
		}
	}
	c := Default()
	with(func(*Tool) {})(&c)
	if err := c.Validate(); err != nil {
		t.Fatalf("a good tool is refused: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"bad name", func(c *Config) { c.Tools = map[string]Tool{"9lives": good} }, "tool name"},
		{"both kinds", with(func(t *Tool) { t.Command = &CommandTool{Argv: []string{"/bin/true"}} }), "exactly one of http and command"},
		{"neither kind", with(func(t *Tool) { t.HTTP = nil }), "exactly one of http and command"},
		{"no schema", with(func(t *Tool) { t.Arguments = nil }), "arguments"},
		{"POST not writable", with(func(t *Tool) { t.HTTP.Method = "POST" }), "declare the tool writable"},
		{"odd method", with(func(t *Tool) { t.HTTP.Method = "TRACE"; t.Writable = true }), "must be GET, HEAD"},
		{"ftp", with(func(t *Tool) { t.HTTP.URL = "ftp://x/y" }), "http or https"},
		{"header with CRLF", with(func(t *Tool) { t.HTTP.Headers = map[string]string{"X-A": "1\r\nX-B: 2"} }), "one-line value"},
		{"body", with(func(t *Tool) { t.HTTP.Body = "form" }), "http.body"},
		{"credential both", with(func(t *Tool) { t.Credential.File = "/run/x" }), "set one of file and env"},
		{"credential none", with(func(t *Tool) { t.Credential.Env = "" }), "set one of file and env"},
		{"credential file relative", with(func(t *Tool) { t.Credential = &Credential{File: "secret"} }), "clean absolute path"},
		{"format without secret", with(func(t *Tool) { t.Credential.Format = "Bearer" }), "{secret} once"},
		{"format twice", with(func(t *Tool) { t.Credential.Format = "{secret}{secret}" }), "{secret} once"},
		{"bad header", with(func(t *Tool) { t.Credential.Header = "X Auth" }), "not a header name"},
		{"timeout over max", with(func(t *Tool) { t.Timeout = Duration(2 * 3600e9) }), "broker.max_timeout"},
		{"response over max", with(func(t *Tool) { t.MaxResponse = 2 << 30 }), "broker.max_response"},
		{"negative rate", with(func(t *Tool) { t.RatePerMinute = -1 }), "rate_per_minute"},
		{"relative argv", with(func(t *Tool) { t.HTTP = nil; t.Command = &CommandTool{Argv: []string{"tool"}} }), "clean absolute path"},
		{"argv0 templated", with(func(t *Tool) { t.HTTP = nil; t.Command = &CommandTool{Argv: []string{"/bin/{x}"}} }), "clean absolute path"},
		{"stdin", with(func(t *Tool) { t.HTTP = nil; t.Command = &CommandTool{Argv: []string{"/bin/true"}, Stdin: "yes"} }), "command.stdin"},
		{"tenant tool shadows", func(c *Config) {
			with(func(*Tool) {})(c)
			c.Tenants = map[string]Tenant{"acme": {Tools: map[string]Tool{"search": good}}}
		}, "declares a tool of that name"},
		{"command_user root", func(c *Config) { c.Broker.CommandUser = "0:0" }, "broker.command_user"},
		{"command_user name", func(c *Config) { c.Broker.CommandUser = "nobody" }, "broker.command_user"},
		{"concurrency", func(c *Config) { c.Broker.SessionConcurrency = 0 }, "broker.session_concurrency"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error about %q", err, tc.want)
			}
		})
	}
}
