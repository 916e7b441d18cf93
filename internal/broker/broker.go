// Package broker owns brokered tool calls: the tools the operator
// declares (an HTTP endpoint or a host command, a JSON Schema for the
// arguments, a credential), compiled when the server starts; the
// endpoint each session that opted in to tools gets inside its sandbox
// (a listener airlock holds in the sandbox's network namespace, see
// Serve); the checks every call passes (the session's tools, the
// schema, the templates' escaping, a rate, daily budgets, concurrency),
// the call itself with the credential attached, bounded in time and
// size, and its record. It also owns the in-sandbox clients
// (ClientFiles: airlock_tools for Python and JavaScript, the
// airlock-tool command).
//
// It must never let a credential reach a sandbox, a log, an error, an
// audit record or a result: credentials are read from files or the
// environment when the server starts, attached only to the outgoing
// call, and every answer is scrubbed of them before it goes back. It
// must never let an argument choose where a call goes (scheme, host,
// port), add a header, or step out of a path segment, and never wait on
// a tool longer than its timeout or hold more of its answer than its
// cap. It trusts nothing the sandbox sends.
package broker

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/secrets"
)

// Broker holds the declared tools of every tenant, their credentials,
// and the counters the server keeps across sessions.
type Broker struct {
	cfg    config.Broker
	log    *slog.Logger
	server map[string]*tool            // every tenant's
	own    map[string]map[string]*tool // tenant -> its own
	client *http.Client
	// slots bounds the calls in flight on the server.
	slots chan struct{}
	// cmdUser: the ids host commands run as (root only).
	cmdUID, cmdGID uint32
	asRoot         bool
	now            func() time.Time

	// mu guards tenantDay.
	mu        sync.Mutex
	tenantDay map[budgetKey]int
}

// budgetKey counts a tenant's calls of a tool on a UTC day.
type budgetKey struct {
	tenant, tool, day string
}

// tool is a declared tool, compiled.
type tool struct {
	name   string
	cfg    config.Tool // with defaults
	schema *argSchema
	url    *urlTemplate  // HTTP tools
	argv   *argvTemplate // command tools
	// urlNames: the arguments the URL writes (the body leaves them out).
	urlNames []string
	secret   string
	// forms are the secret as an answer could echo it, scrubbed from
	// every answer.
	forms      []string
	scrubber   *secrets.Scrubber // nil: no credential
	redactArgs map[string]bool
}

// Options are what tests and the composition root change.
type Options struct {
	Log *slog.Logger
	// RootCAs verify HTTPS tools' servers (nil: the host's trust store).
	RootCAs *x509.CertPool
	// Env is the server's environment, for credentials named by env
	// (nil: os.Environ).
	Env []string
	// Now is the clock of rates and budgets (nil: time.Now).
	Now func() time.Time
}

// New compiles every tool of c and reads their credentials. An error
// names the tool and what is wrong; the server does not start with it.
func New(c config.Config, o Options) (*Broker, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	uid, gid, err := config.ParseUser(c.Broker.CommandUser)
	if err != nil {
		return nil, fmt.Errorf("%w: broker.command_user: %v", errdefs.ErrInvalidArgument, err)
	}
	b := &Broker{cfg: c.Broker, log: o.Log, server: map[string]*tool{}, own: map[string]map[string]*tool{},
		slots: make(chan struct{}, c.Broker.ServerConcurrency), cmdUID: uid, cmdGID: gid, asRoot: os.Geteuid() == 0,
		now: o.Now, tenantDay: map[budgetKey]int{}}
	b.client = newHTTPClient(o.RootCAs, c.Broker.ProxyFromEnvironment)
	var errs []error
	compileAll := func(prefix string, tools map[string]config.Tool, into map[string]*tool) {
		for _, name := range sortedKeys(tools) {
			t, err := compile(name, tools[name], env)
			if err != nil {
				errs = append(errs, fmt.Errorf("%stools.%s: %v", prefix, name, err))
				continue
			}
			into[name] = t
		}
	}
	compileAll("", c.Tools, b.server)
	for _, tn := range sortedKeys(c.Tenants) {
		if len(c.Tenants[tn].Tools) > 0 {
			b.own[tn] = map[string]*tool{}
			compileAll("tenants."+tn+".", c.Tenants[tn].Tools, b.own[tn])
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, errors.Join(errs...))
	}
	return b, nil
}

// compile compiles one tool.
func compile(name string, c config.Tool, env []string) (*tool, error) {
	c = c.Effective()
	t := &tool{name: name, cfg: c, redactArgs: map[string]bool{}}
	var templated []string
	if c.HTTP != nil {
		u, err := parseURL(c.HTTP.URL)
		if err != nil {
			return nil, fmt.Errorf("http.url: %v", err)
		}
		t.url = u
		if slices.Contains(u.pathNames(), "") {
			return nil, errors.New("http.url: empty placeholder")
		}
		templated = append(u.pathNames(), u.queryNames()...)
		t.urlNames = templated
	} else {
		a, err := parseArgv(c.Command.Argv)
		if err != nil {
			return nil, fmt.Errorf("command.%v", err)
		}
		t.argv = a
		templated = a.names()
	}
	s, err := compileSchema(c.Arguments, templated)
	if err != nil {
		return nil, fmt.Errorf("arguments: %v", err)
	}
	t.schema = s
	if t.url != nil {
		// A path placeholder must have a value: a missing one would
		// change the path's shape.
		for _, n := range t.url.pathNames() {
			if !slices.Contains(s.root.Required, n) {
				return nil, fmt.Errorf("http.url: {%s} is in the path, so the schema must list it in required", n)
			}
		}
	}
	for _, n := range c.RedactArguments {
		if _, ok := s.root.Properties[n]; !ok {
			return nil, fmt.Errorf("redact_arguments: %q is not an argument of the schema", n)
		}
		t.redactArgs[n] = true
	}
	if cr := c.Credential; cr != nil {
		v, err := secrets.Read(cr.File, cr.Env, env)
		if err != nil {
			return nil, fmt.Errorf("credential: %v", err)
		}
		t.secret = v
		t.forms = secrets.Forms(v)
		t.scrubber = secrets.NewScrubber(v, redacted)
	}
	return t, nil
}

// lookup finds tenant's tool name.
func (b *Broker) lookup(tenant, name string) *tool {
	if t, ok := b.own[tenant][name]; ok {
		return t
	}
	return b.server[name]
}

// Names are the tools tenant may opt in to, sorted.
func (b *Broker) Names(tenant string) []string {
	out := sortedKeys(b.server)
	for n := range b.own[tenant] {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Resolve checks a session's request for tools: every name must be one
// of its tenant's (the error names those that are not, and those it may
// ask for). Duplicates are dropped; the result is sorted.
func (b *Broker) Resolve(tenant string, asked []string) ([]string, error) {
	if len(asked) == 0 {
		return nil, nil
	}
	var unknown []string
	out := make([]string, 0, len(asked))
	for _, n := range asked {
		if b == nil || b.lookup(tenant, n) == nil {
			unknown = append(unknown, fmt.Sprintf("%q", clip(n, 64)))
			continue
		}
		out = append(out, n)
	}
	if len(unknown) > 0 {
		have := "this server declares no tools"
		if b != nil && len(b.Names(tenant)) > 0 {
			have = "the tools you may use are: " + strings.Join(b.Names(tenant), ", ")
		}
		return nil, fmt.Errorf("%w: tools: no tool %s; %s", errdefs.ErrInvalidArgument, strings.Join(unknown, ", "), have)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Describe describes tenant's tools names (all of them when names is
// nil), in order.
func (b *Broker) Describe(tenant string, names []string) []apitype.ToolInfo {
	if b == nil {
		return []apitype.ToolInfo{}
	}
	if names == nil {
		names = b.Names(tenant)
	}
	out := make([]apitype.ToolInfo, 0, len(names))
	for _, n := range names {
		t := b.lookup(tenant, n)
		if t == nil {
			continue
		}
		info := apitype.ToolInfo{Name: n, Description: t.cfg.Description, Writable: t.cfg.Writable, Arguments: t.schema.raw}
		if t.url != nil {
			info.Kind = apitype.ToolHTTP
		} else {
			info.Kind = apitype.ToolCommand
		}
		out = append(out, info)
	}
	return out
}
