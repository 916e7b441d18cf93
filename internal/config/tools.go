package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// Tool is a call sandbox code may make through airlock (package broker):
// an HTTP endpoint or a host command, with the JSON Schema its arguments
// must pass and the credential airlock attaches on the host side. The
// sandbox never sees the credential. Set exactly one of HTTP and Command.
type Tool struct {
	// Description tells code and agents what the tool does (shown by
	// list_tools, the MCP tools and the session).
	Description string `json:"description"`
	// HTTP calls an HTTP endpoint.
	HTTP *HTTPTool `json:"http,omitempty"`
	// Command runs a host command, outside every sandbox.
	Command *CommandTool `json:"command,omitempty"`
	// Arguments is the JSON Schema of the call's arguments: an object
	// schema ("type": "object") whose properties the templates name.
	// Allowlists are its keywords: enum, pattern, maxLength, minimum and
	// maximum. A string a template uses needs maxLength, enum or const.
	Arguments json.RawMessage `json:"arguments"`
	// Writable lets an HTTP tool use a method other than GET and HEAD
	// (POST, PUT, PATCH, DELETE): tools are read-only unless declared so.
	Writable bool `json:"writable,omitempty"`
	// Credential is what airlock attaches to each call (none: the tool
	// needs no credential).
	Credential *Credential `json:"credential,omitempty"`
	// RedactArguments names arguments whose values the audit log, the
	// execution's tool_calls and the events never show.
	RedactArguments []string `json:"redact_arguments,omitempty"`
	// Timeout bounds a call, connection and answer (0: 10s, at most
	// broker.max_timeout).
	Timeout Duration `json:"timeout,omitempty"`
	// MaxResponse caps the answer a call may return (the HTTP body, or
	// the command's stdout); a larger one is refused, not cut (0: 1M, at
	// most broker.max_response).
	MaxResponse Size `json:"max_response,omitempty"`
	// RatePerMinute and Burst bound each session's calls to the tool (a
	// token bucket; 0: 60 a minute, a burst of 10).
	RatePerMinute int `json:"rate_per_minute,omitempty"`
	Burst         int `json:"burst,omitempty"`
	// DailyPerSession and DailyPerTenant are the calls a session and a
	// tenant may make a UTC day, counted by this server (0: 1000 per
	// session, no tenant budget).
	DailyPerSession int `json:"daily_per_session,omitempty"`
	DailyPerTenant  int `json:"daily_per_tenant,omitempty"`
}

// HTTPTool is an HTTP endpoint.
type HTTPTool struct {
	// Method is GET (the default) or HEAD; POST, PUT, PATCH or DELETE
	// need writable.
	Method string `json:"method,omitempty"`
	// URL is the endpoint, http or https, with {name} where an argument
	// goes: in the path (each value escaped as one segment; "." and ".."
	// are refused) or in the query (escaped as a value). The scheme, host
	// and port are fixed: no argument may appear there.
	URL string `json:"url"`
	// Headers are sent with every call (fixed values, never arguments).
	Headers map[string]string `json:"headers,omitempty"`
	// Body "json" sends the arguments the URL does not use as a JSON
	// object; "none" sends no body. Default: "json" for writable methods,
	// "none" for GET and HEAD.
	Body string `json:"body,omitempty"`
}

// CommandTool is a host command: run without a shell, outside every
// sandbox, as broker.command_user when the server is root (else as the
// server's user), with a clean environment, in its own process group
// killed at the timeout.
type CommandTool struct {
	// Argv is the command: an absolute path, then its arguments, each of
	// which may hold {name} (an argument's value, whole, never split; a
	// value starting with "-" is refused: put "--" before it if the
	// program allows that).
	Argv []string `json:"argv"`
	// Dir is the working directory (absolute; default /).
	Dir string `json:"dir,omitempty"`
	// Stdin "json" sends the arguments as a JSON object on stdin; "none"
	// (the default) sends nothing.
	Stdin string `json:"stdin,omitempty"`
	// Env are further fixed variables of the command (PATH is
	// /usr/local/bin:/usr/bin:/bin unless set here).
	Env map[string]string `json:"env,omitempty"`
}

// Credential says where a secret is read from (never the configuration
// text itself) and how a call carries it.
type Credential struct {
	// File holds the secret (a mounted Kubernetes Secret); Env names a
	// variable of the server's environment holding it. Set one. Read
	// when the server starts.
	File string `json:"file,omitempty"`
	Env  string `json:"env,omitempty"`
	// Header carries it in HTTP calls (default "Authorization"), as
	// Format says with {secret} in place of the value (default "Bearer
	// {secret}").
	Header string `json:"header,omitempty"`
	Format string `json:"format,omitempty"`
	// EnvVar carries it to a command, as that environment variable
	// (default AIRLOCK_CREDENTIAL).
	EnvVar string `json:"env_var,omitempty"`
}

// Broker configures brokered tool calls as a whole: the caps every tool's own limits are held to.
type Broker struct {
	// MaxArgumentBytes caps the JSON arguments of one call.
	MaxArgumentBytes Size `json:"max_argument_bytes"`
	// MaxResponse and MaxTimeout cap what a tool may declare.
	MaxResponse Size     `json:"max_response"`
	MaxTimeout  Duration `json:"max_timeout"`
	// SessionConcurrency caps the calls in flight of one session,
	// ServerConcurrency those of the whole server; one more is refused
	// at once (429).
	SessionConcurrency int `json:"session_concurrency"`
	ServerConcurrency  int `json:"server_concurrency"`
	// CommandUser is the uid:gid host commands run as when the server
	// runs as root (default 65534:65534, nobody).
	CommandUser string `json:"command_user"`
	// ProxyFromEnvironment sends HTTP tools' calls through the proxy the
	// server's environment names (HTTPS_PROXY, HTTP_PROXY, NO_PROXY);
	// off by default: calls go straight to the tool, whatever the
	// server's environment says.
	ProxyFromEnvironment bool `json:"proxy_from_environment,omitempty"`
}

// Defaults of a tool's own limits, when it sets none.
const (
	DefaultToolTimeout      = Duration(10 * time.Second)
	DefaultToolResponse     = Size(1 << 20)
	DefaultToolRate         = 60
	DefaultToolBurst        = 10
	DefaultToolDailySession = 1000
	DefaultCredentialEnv    = "AIRLOCK_CREDENTIAL"
)

// DefaultBroker is the built-in broker section.
func DefaultBroker() Broker {
	return Broker{MaxArgumentBytes: 64 << 10, MaxResponse: 8 << 20, MaxTimeout: Duration(5 * time.Minute),
		SessionConcurrency: 4, ServerConcurrency: 64, CommandUser: "65534:65534"}
}

// Effective is the tool with its limits defaulted.
func (t Tool) Effective() Tool {
	if t.Timeout == 0 {
		t.Timeout = DefaultToolTimeout
	}
	if t.MaxResponse == 0 {
		t.MaxResponse = DefaultToolResponse
	}
	if t.RatePerMinute == 0 {
		t.RatePerMinute = DefaultToolRate
	}
	if t.Burst == 0 {
		t.Burst = DefaultToolBurst
	}
	if t.DailyPerSession == 0 {
		t.DailyPerSession = DefaultToolDailySession
	}
	if t.HTTP != nil {
		h := *t.HTTP
		if h.Method == "" {
			h.Method = "GET"
		}
		if h.Body == "" {
			h.Body = "none"
			if h.Method != "GET" && h.Method != "HEAD" {
				h.Body = "json"
			}
		}
		t.HTTP = &h
	}
	if t.Command != nil {
		c := *t.Command
		if c.Dir == "" {
			c.Dir = "/"
		}
		if c.Stdin == "" {
			c.Stdin = "none"
		}
		t.Command = &c
	}
	if t.Credential != nil {
		c := *t.Credential
		if c.Header == "" {
			c.Header = "Authorization"
		}
		if c.Format == "" {
			c.Format = "Bearer {secret}"
		}
		if c.EnvVar == "" {
			c.EnvVar = DefaultCredentialEnv
		}
		t.Credential = &c
	}
	return t
}

// ToolsFor are the tools tenant may opt its sessions into: the server's
// and its own.
func (c Config) ToolsFor(tenant string) map[string]Tool {
	out := make(map[string]Tool, len(c.Tools))
	for n, t := range c.Tools {
		out[n] = t
	}
	for n, t := range c.Tenants[tenant].Tools {
		out[n] = t
	}
	return out
}

// HasTools reports whether the server declares any tool (for every
// tenant or for one): without, the broker is off and costs nothing.
func (c Config) HasTools() bool {
	if len(c.Tools) > 0 {
		return true
	}
	for _, t := range c.Tenants {
		if len(t.Tools) > 0 {
			return true
		}
	}
	return false
}

// CheckToolName checks a tool's name: a letter, then up to 63 letters,
// digits, '_' and '-' (what MCP, OpenAI and Python accept as a name).
func CheckToolName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("tool name %q must be 1 to 64 characters", clip(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && (c >= '0' && c <= '9' || c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("tool name %q: letters, digits, '_' and '-', starting with a letter", clip(name))
		}
	}
	return nil
}

// writableMethods are the methods a writable HTTP tool may use.
var writableMethods = []string{"POST", "PUT", "PATCH", "DELETE"}

// validate checks a tool's data; its templates and schema are compiled
// by package broker when the server starts.
func (t Tool) validate(key string, b Broker) []error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(key+": "+f, a...)) }
	if (t.HTTP == nil) == (t.Command == nil) {
		bad("set exactly one of http and command")
	}
	if len(t.Description) > 1024 || strings.ContainsAny(t.Description, "\x00") {
		bad("description must be at most 1024 bytes")
	}
	if len(t.Arguments) == 0 {
		bad("arguments (a JSON Schema of an object) is required")
	}
	e := t.Effective()
	if e.Timeout < Duration(time.Millisecond) || e.Timeout > b.MaxTimeout {
		bad("timeout %s must be positive and at most broker.max_timeout (%s)", e.Timeout, b.MaxTimeout)
	}
	if e.MaxResponse < 1 || e.MaxResponse > b.MaxResponse {
		bad("max_response %s must be positive and at most broker.max_response (%s)", e.MaxResponse, b.MaxResponse)
	}
	if e.RatePerMinute < 1 || e.RatePerMinute > 100000 || e.Burst < 1 || e.Burst > 100000 {
		bad("rate_per_minute and burst must be between 1 and 100000")
	}
	if e.DailyPerSession < 1 || e.DailyPerTenant < 0 {
		bad("daily_per_session must be positive (0: the default) and daily_per_tenant not negative")
	}
	if h := e.HTTP; h != nil {
		switch {
		case h.Method == "GET" || h.Method == "HEAD":
		case slices.Contains(writableMethods, h.Method):
			if !t.Writable {
				bad("http.method %s changes things: declare the tool writable (tools are read-only: GET and HEAD)", h.Method)
			}
		default:
			bad("http.method %q must be GET, HEAD, POST, PUT, PATCH or DELETE", h.Method)
		}
		if !strings.HasPrefix(h.URL, "https://") && !strings.HasPrefix(h.URL, "http://") {
			bad("http.url %q must be an http or https URL", clip(h.URL))
		}
		if h.Body != "json" && h.Body != "none" {
			bad("http.body %q must be \"json\" or \"none\"", h.Body)
		}
		for name, v := range h.Headers {
			if !validHeaderName(name) || strings.ContainsAny(v, "\r\n\x00") {
				bad("http.headers: %q must be a header name with a one-line value", clip(name))
			}
		}
	}
	if c := e.Command; c != nil {
		if len(c.Argv) == 0 || !filepath.IsAbs(c.Argv[0]) || filepath.Clean(c.Argv[0]) != c.Argv[0] || strings.Contains(c.Argv[0], "{") {
			bad("command.argv must start with a clean absolute path (no argument in it)")
		}
		if !filepath.IsAbs(c.Dir) || filepath.Clean(c.Dir) != c.Dir {
			bad("command.dir %q must be a clean absolute path", c.Dir)
		}
		if c.Stdin != "json" && c.Stdin != "none" {
			bad("command.stdin %q must be \"json\" or \"none\"", c.Stdin)
		}
		for k := range c.Env {
			if !validEnvName(k) {
				bad("command.env: %q is not a variable name", clip(k))
			}
		}
	}
	if cr := e.Credential; cr != nil {
		errs = append(errs, checkSource(key+".credential", cr.File, cr.Env)...)
		if !validHeaderName(cr.Header) {
			bad("credential.header %q is not a header name", clip(cr.Header))
		}
		if strings.Count(cr.Format, "{secret}") != 1 || strings.ContainsAny(cr.Format, "\r\n\x00") {
			bad("credential.format must be one line holding {secret} once")
		}
		if !validEnvName(cr.EnvVar) {
			bad("credential.env_var %q is not a variable name", clip(cr.EnvVar))
		}
	}
	return errs
}

// checkSource checks a secret's source: a file or a variable, one of them.
func checkSource(key, file, env string) []error {
	switch {
	case (file == "") == (env == ""):
		return []error{fmt.Errorf("%s: set one of file and env (the secret itself is never in the configuration)", key)}
	case file != "" && (!filepath.IsAbs(file) || filepath.Clean(file) != file):
		return []error{fmt.Errorf("%s.file %q must be a clean absolute path", key, file)}
	case env != "" && !validEnvName(env):
		return []error{fmt.Errorf("%s.env %q is not a variable name", key, clip(env))}
	}
	return nil
}

// validHeaderName reports whether s is an HTTP field name (a token).
func validHeaderName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validateTools checks the tools and the broker section:
// names, one tool name per tenant, the caps.
func (c Config) validateTools() []error {
	var errs []error
	b := c.Broker
	if b.MaxArgumentBytes < 1<<10 || b.MaxArgumentBytes > 16<<20 {
		errs = append(errs, errors.New("broker.max_argument_bytes must be between 1K and 16M"))
	}
	if b.MaxResponse < 1<<10 || b.MaxResponse > 1<<30 {
		errs = append(errs, errors.New("broker.max_response must be between 1K and 1G"))
	}
	if b.MaxTimeout < Duration(time.Second) || b.MaxTimeout > Duration(time.Hour) {
		errs = append(errs, errors.New("broker.max_timeout must be between 1s and 1h"))
	}
	if b.SessionConcurrency < 1 || b.ServerConcurrency < b.SessionConcurrency || b.ServerConcurrency > 65536 {
		errs = append(errs, errors.New("broker.session_concurrency must be at least 1, and broker.server_concurrency at least that and at most 65536"))
	}
	if _, _, err := ParseUser(b.CommandUser); err != nil {
		errs = append(errs, fmt.Errorf("broker.command_user: %v", err))
	}
	check := func(prefix string, tools map[string]Tool) {
		for _, name := range sortedNames(tools) {
			if err := CheckToolName(name); err != nil {
				errs = append(errs, fmt.Errorf("%stools: %v", prefix, err))
			}
			errs = append(errs, tools[name].validate(prefix+"tools."+name, b)...)
		}
	}
	check("", c.Tools)
	for _, tn := range sortedNames(c.Tenants) {
		t := c.Tenants[tn]
		check("tenants."+tn+".", t.Tools)
		for name := range t.Tools {
			if _, dup := c.Tools[name]; dup {
				errs = append(errs, fmt.Errorf("tenants.%s.tools.%s: the server declares a tool of that name for every tenant", tn, name))
			}
		}
	}
	return errs
}

// ParseUser parses "uid:gid" (numbers).
func ParseUser(s string) (uid, gid uint32, err error) {
	u, g, ok := strings.Cut(s, ":")
	var a, b uint64
	if ok {
		_, err1 := fmt.Sscanf(u, "%d", &a)
		_, err2 := fmt.Sscanf(g, "%d", &b)
		ok = err1 == nil && err2 == nil && fmt.Sprint(a) == u && fmt.Sprint(b) == g && a > 0 && b > 0 && a < 1<<31 && b < 1<<31
	}
	if !ok {
		return 0, 0, fmt.Errorf("%q must be uid:gid, two numbers other than 0 (root)", clip(s))
	}
	return uint32(a), uint32(b), nil
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
