// Package config owns airlock's configuration: one versioned struct with
// defaults, loaded from an optional JSON file, overridden by AIRLOCK_*
// environment variables and then by the command line's flags, secrets
// read from their *_file variants, checked by Validate (Build is the one
// place that does all of it, in that order), printed with secrets masked;
// the defaults and server maximums of the limits (whose types are the
// wire's, apitype's) and Resolve, which checks a request against them.
//
// It must never touch the host (no syscalls, no files other than the config
// file and the secret files it is asked to read), so that it stays a pure,
// fuzzable parser.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// Mode says whether an optional protection layer must be applied.
type Mode string

const (
	// Required: refuse to run code when the layer cannot be applied.
	Required Mode = "required"
	// Off: the operator explicitly disabled the layer. Doctor says so.
	Off Mode = "off"
)

// Protections lists the layers an operator may switch off. Namespaces,
// pivot_root, capabilities, no_new_privs and cgroup limits are not optional.
type Protections struct {
	// Seccomp is the system call filter: "required" or "off".
	Seccomp Mode `json:"seccomp"`
	// Landlock confines the sandbox's file access and signals from
	// inside: "required" or "off".
	Landlock Mode `json:"landlock"`
}

// Runtimes are the interpreters sandboxes may run. They must live under
// /usr, which is the only host tree a sandbox sees.
type Runtimes struct {
	// Python, Bash and Node are the interpreters of the three languages
	// (clean paths under /usr).
	Python string `json:"python"`
	Bash   string `json:"bash"`
	Node   string `json:"node"`
	// PythonPackages are checked by doctor and preloaded by warm pools.
	PythonPackages []string `json:"python_packages"`
}

// Config is the whole of airlock's configuration.
type Config struct {
	// Version is the configuration format's version: 1 (0 means 1).
	Version int `json:"version"`
	// StateDir holds the server's run-time state (an empty mount point
	// for sandbox roots). It is created 0700 and owned by root.
	StateDir string `json:"state_dir"`
	// CacheDir holds data computed once per host and shared read-only
	// by sandboxes (the matplotlib font list).
	CacheDir string `json:"cache_dir"`
	// DataDir holds what must survive a restart: the database of API
	// keys, tenants' quotas and the audit log. Unlike state_dir it must
	// be persistent storage.
	DataDir string `json:"data_dir"`
	// LockDir holds the locks that keep two servers on one host from
	// handing out the same host ids or sweeping each other's cgroups;
	// every server on a host must name the same directory (a pod's
	// servers: one in its writable state volume).
	LockDir string `json:"lock_dir"`
	// CgroupParent is the cgroup, relative to each hierarchy's root,
	// under which every sandbox gets its own cgroup.
	CgroupParent string `json:"cgroup_parent"`
	// IDBase is the first host uid/gid given to sandboxes. Each sandbox
	// gets two ids of its own; host root is never mapped in.
	IDBase uint32 `json:"id_base"`
	// IDCount, when set ("pod mode"), is the number of host ids from
	// IDBase that airlock may use: CLI runs and server sandboxes share
	// them (see jail.Layout). It lets the range fit in the 65,536 ids a
	// user-namespaced pod (hostUsers: false) maps. 0: the host layout,
	// 2^25 ids from an IDBase of at least 65536.
	IDCount uint32 `json:"id_count"`

	Runtimes    Runtimes    `json:"runtimes"`
	Protections Protections `json:"protections"`

	// Defaults apply to every limit a request leaves unset; Max caps
	// every limit a request may ask for.
	Defaults Limits `json:"defaults"`
	Max      Limits `json:"max"`

	// Isolation is the kernel every sandbox's code talks to: "native"
	// (the host's, behind airlock's own jail) or "gvisor" (gVisor's
	// user-space kernel, runsc, launched by airlock from the host side).
	Isolation Isolation `json:"isolation"`
	// AllowIsolation lists the isolations a request may ask for besides
	// the server's own (the operator's choice: a client may never pick
	// what is not listed here). Empty: every request gets Isolation.
	AllowIsolation []Isolation  `json:"allow_isolation"`
	GVisor         GVisorConfig `json:"gvisor"`

	Server Server `json:"server"`
	MCP    MCP    `json:"mcp"`
	Pool   Pool   `json:"pool"`
	// Quotas apply to every tenant; a tenant's own (airlock keys create
	// --tenant T with quota flags) override them field by field.
	Quotas Quotas `json:"quotas"`
	Audit  Audit  `json:"audit"`
	// Store is where keys, quotas' counts, the audit log and the
	// sessions directory are kept: SQLite in data_dir, or PostgreSQL
	// shared by a cluster's servers.
	Store Store `json:"store"`
	// Cluster makes the server one of several behind a router (pods of a
	// StatefulSet): session ids then carry its name.
	Cluster Cluster `json:"cluster"`
	// Network configures egress by allowlist.
	Network Network `json:"network"`
	// Ports configures access from outside to programs listening inside
	// sessions (web apps, APIs, dev servers).
	Ports Ports `json:"ports"`
	// Packages configures package installation.
	Packages Packages `json:"packages"`
	// Templates configures the root filesystems sandboxes may be made
	// from besides the host's, which `airlock template` registers.
	Templates Templates `json:"templates"`
	// Persistence lets sessions be paused and resumed, and outlive the
	// server's restarts.
	Persistence Persistence `json:"persistence"`
	Metrics     Metrics     `json:"metrics"`
	Log         Log         `json:"log"`
	// History is what each session remembers of its executions and
	// commands, for the console and GET /v1/sessions/{id}/history.
	History History `json:"history"`
	// Console is the web console at /ui/.
	Console Console `json:"console"`
	// E2B is the E2B-compatible API, for code written for E2B's SDKs.
	E2B E2B `json:"e2b"`
	// Redaction is the output policy of every tenant's sessions unless
	// Tenants says otherwise; not a security boundary.
	Redaction Redaction `json:"redaction"`
	// CodeRules are advisory rules over submitted code, checked for
	// every tenant (a tenant's own are checked after them).
	CodeRules []CodeRule `json:"code_rules,omitempty"`
	// Tools are the calls sandbox code may make through airlock with a
	// credential it never sees (package broker), for every tenant; a
	// session opts in to them by name. Tenants may have their own.
	Tools map[string]Tool `json:"tools,omitempty"`
	// Broker caps tools' calls and limits.
	Broker Broker `json:"broker"`
	// Secrets are credentials bound to hosts, for every tenant: a
	// session that opts in by name sees a placeholder, which the egress
	// gate replaces with the value in requests to the bound hosts only.
	// Tenants may have their own.
	Secrets map[string]Secret `json:"secrets,omitempty"`
	// SecretsCA is the authority the gate's certificates for bound hosts
	// come from (default: one airlock makes in data_dir/secrets).
	SecretsCA SecretsCA `json:"secrets_ca,omitzero"`
	// Tenants configures tenants by name: their redaction, code rules,
	// isolation, templates and tools.
	Tenants map[string]Tenant `json:"tenants,omitempty"`
}

// Cluster names this server among others. At most one of the three
// sources may be set; none means a server on its own, whose session ids
// carry no name.
type Cluster struct {
	// PodName is the server's name (a DNS label, e.g. "airlock-3").
	PodName string `json:"pod_name"`
	// PodNameFile is a file holding it (Kubernetes' downward API).
	PodNameFile string `json:"pod_name_file"`
	// PodNameEnv is an environment variable holding it (e.g. POD_NAME
	// set from the downward API).
	PodNameEnv string `json:"pod_name_env"`
}

// Enabled reports whether the server is one of a cluster.
func (c Cluster) Enabled() bool { return c.PodName != "" || c.PodNameFile != "" || c.PodNameEnv != "" }

// Isolation names a kernel sandboxes can run on (the wire's type).
type Isolation = apitype.Isolation

// The isolations.
const (
	Native = apitype.Native
	GVisor = apitype.GVisor
)

// GVisorConfig configures the gVisor isolation.
type GVisorConfig struct {
	// Runsc is the runsc binary; empty looks for runsc on PATH, then in
	// /usr/local/bin.
	Runsc string `json:"runsc"`
	// Platform is runsc's platform: "systrap" (the default) or "ptrace".
	// KVM is not offered: where /dev/kvm works (a VM and a vCPU can be
	// made), the pinned runsc's KVM platform still panics setting up its
	// vCPU ("error setting system registers: invalid argument").
	Platform string `json:"platform"`
	// Checkpoint makes a pause of a gVisor session without a network
	// keep its memory (interpreter variables, running processes:
	// restored "memory") with runsc checkpoint and restore. Every gVisor
	// sandbox's init is then airlock's keeper, which starts its programs
	// (a relay per program copies their input and output). Unset (null):
	// on when the server may run gVisor sessions (isolation,
	// allow_isolation) and persistence.enabled, off otherwise; true needs
	// persistence.enabled; false: gVisor sessions pause with their files
	// only. When on, the server checks at start that runsc can
	// checkpoint and restore a sandbox here, and refuses to start if not.
	Checkpoint *bool `json:"checkpoint"`
	// PoolImage makes the warm pools build their gVisor Python and bash
	// sandboxes (without a network) by restoring a checkpoint of one
	// fresh pooled sandbox, which the server makes at start and which
	// never ran a client's code, instead of booting each and starting
	// its runtime (a Python one imports the preloaded libraries in
	// seconds): refills, and a creation that finds its pool drained, take
	// a fraction of that. Each restored runtime's random generators are
	// reseeded; its hash seed and address-space layout are the image's,
	// as a template's forks share the template's natively. Every gVisor
	// sandbox's init is then airlock's keeper (see checkpoint), which
	// gvisor.checkpoint: false therefore refuses.
	PoolImage bool `json:"pool_image"`
}

// GVisorCheckpoint reports whether gVisor sandboxes keep their memory
// across a pause (gvisor.checkpoint, resolved), and why, for doctor and
// the server's errors.
func (c Config) GVisorCheckpoint() (on bool, why string) {
	switch {
	case c.GVisor.Checkpoint != nil && *c.GVisor.Checkpoint:
		return true, "gvisor.checkpoint: true"
	case c.GVisor.Checkpoint != nil:
		return false, "gvisor.checkpoint: false (gVisor sessions pause with their files only)"
	case !c.Allows(GVisor):
		return false, "gvisor.checkpoint unset, and this server runs no gVisor sessions (isolation, allow_isolation)"
	case !c.Persistence.Enabled:
		return false, "gvisor.checkpoint unset, and persistence.enabled is off (nothing is paused)"
	}
	return true, "gvisor.checkpoint unset: on, as this server runs gVisor sessions with persistence.enabled (set it to false to pause them with their files only)"
}

// Allows reports whether a request may ask for isolation i.
func (c Config) Allows(i Isolation) bool {
	return i == c.Isolation || slices.Contains(c.AllowIsolation, i)
}

// Isolations are the isolations this server may need: its own first,
// then the ones requests may pick.
func (c Config) Isolations() []Isolation {
	out := []Isolation{c.Isolation}
	for _, i := range c.AllowIsolation {
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out
}

// Server configures `airlock serve`.
type Server struct {
	// Listen is the API's TCP address (host:port); a non-loopback one
	// needs auth "keys".
	Listen string `json:"listen"`
	// Socket is a unix socket serving the same API to local clients,
	// without the token: it is accessible to the server's user only.
	// `airlock run` sends its programs there when a server runs. Empty
	// means <state_dir>/airlock.sock; "off" disables it.
	Socket string `json:"socket"`
	// Auth is "keys" (every request but /healthz needs an API key or the
	// token as "Authorization: Bearer ...") or "none" (no authentication,
	// allowed only with a loopback listen address).
	Auth string `json:"auth"`
	// Token, when set, is accepted as an admin API key (the single shared
	// token of earlier versions; prefer keys). TokenFile names a file
	// holding it instead (a mounted secret).
	Token     string `json:"token"`
	TokenFile string `json:"token_file,omitempty"`
	// MaxSessions caps live sessions (pooled sandboxes not counted).
	MaxSessions int `json:"max_sessions"`
	// MaxConcurrentExecutions caps executions running at once, one-shot
	// ones included, and, apart, the sandboxes of one-shot and program
	// runs alive at once (running, or being torn down after their
	// answer). Further requests wait up to QueueTimeout.
	MaxConcurrentExecutions int      `json:"max_concurrent_executions"`
	QueueTimeout            Duration `json:"queue_timeout"`
	// MaxBodyBytes caps JSON request bodies; file uploads are capped by
	// MaxFileBytes instead.
	MaxBodyBytes Size `json:"max_body_bytes"`
	MaxFileBytes Size `json:"max_file_bytes"`
	// IdleTimeout is the default idle timeout of a session; MaxIdleTimeout
	// caps what a client may ask for.
	IdleTimeout    Duration `json:"idle_timeout"`
	MaxIdleTimeout Duration `json:"max_idle_timeout"`
	// MaxSessionTimeout caps a session's lifetime (a request's timeout,
	// and PUT /v1/sessions/{id}/timeout), counted from its creation or the
	// last PUT; a session that asks for none has no lifetime of its own.
	MaxSessionTimeout Duration `json:"max_session_timeout"`
	// InterruptGrace is how long an interpreter has to yield after an
	// interrupt before its session is killed.
	InterruptGrace Duration `json:"interrupt_grace"`
	// MaxEnv caps the number of environment variables a client may set.
	MaxEnv int `json:"max_env"`
	// MaxMetadata caps the number of metadata entries a client may give a
	// session (each key at most 256 bytes, each value 2 KiB, all of them
	// 32 KiB); 0 refuses metadata.
	MaxMetadata int `json:"max_metadata"`
	// MaxConcurrentTransfers caps file uploads and downloads in progress
	// on the server, MaxSessionTransfers those of one session; one more
	// is refused at once with 429.
	MaxConcurrentTransfers int `json:"max_concurrent_transfers"`
	MaxSessionTransfers    int `json:"max_session_transfers"`
	// TransferStallTimeout ends an upload whose client sent nothing, or a
	// download whose client read nothing, for that long. A slow transfer
	// that keeps moving is never cut off.
	TransferStallTimeout Duration `json:"transfer_stall_timeout"`
	// MaxRichOutput caps the rich outputs (display and result data: plots,
	// tables) the server holds for one execution; later ones are dropped
	// and counted in results_dropped. It does not grow with max_output, so
	// the server's memory for rich outputs is at most this times
	// max_concurrent_executions.
	MaxRichOutput Size `json:"max_rich_output"`
	// MaxSessionCommands caps the shell commands running at once in one
	// session (POST /v1/sessions/{id}/commands); one more gets 429.
	MaxSessionCommands int `json:"max_session_commands"`
	// MaxSessionPtys caps the pseudo-terminals one sandbox holds open at
	// once: its own devpts instance's max, counting its terminal commands
	// (pty) and the terminals its code opens (os.openpty, script,
	// pexpect). One more fails inside the sandbox (ENOSPC), or gets 429
	// for a terminal command; other sandboxes and the host keep theirs.
	// At most 4096. 0 (the default): server.max_ptys shared evenly by the
	// sandboxes the server may hold at once (max_sessions +
	// max_concurrent_executions + the pools at their max_size + the
	// template), at most 64.
	MaxSessionPtys int `json:"max_session_ptys"`
	// MaxPtys is the pseudo-terminals all the server's sandboxes may hold
	// together. The kernel counts every pty of the host against one limit
	// (kernel.pty.max, of which devpts instances other than the host's own
	// may use all but kernel.pty.reserve): sandboxes that together could
	// hold more would, once it is reached, leave none for each other. The
	// server refuses to start when max_session_ptys × the sandboxes it may
	// hold exceeds it, or when it exceeds what the kernel gives. 0 (the
	// default): kernel.pty.max − kernel.pty.reserve, read at start.
	MaxPtys int `json:"max_ptys"`
	// MaxSessionContexts caps the code contexts (interpreters) one session
	// holds at once, its default context included
	// (POST /v1/sessions/{id}/contexts, or an execution naming another
	// language); one more gets 429. Every context's processes share the
	// session's limits.
	MaxSessionContexts int `json:"max_session_contexts"`
}

// MCP configures the Model Context Protocol server at /mcp.
type MCP struct {
	// Enabled serves MCP's streamable HTTP transport at /mcp, behind the
	// API's authentication.
	Enabled bool `json:"enabled"`
	// SessionTimeout ends an MCP session (and its sessions) after this
	// long without a request, even with a stream open; and, after a
	// restart, the paused sessions of the last run's MCP connections
	// that no connection has named this long after the start.
	SessionTimeout Duration `json:"session_timeout"`
	// IdleTimeout ends an MCP session whose client has no request in
	// flight and no stream open (it went away without DELETE), with its
	// sessions.
	IdleTimeout Duration `json:"idle_timeout"`
	// Content lists the blocks tool results carry besides text (see
	// MCPContent); an HTTP client may ask for its own with /mcp?content=.
	// None by default: text is what every agent framework's converter
	// turns into a request its model provider accepts, and images or
	// resource links are not (OpenAI refuses images in tool messages;
	// LangChain JS makes a resource link a URL file block that OpenAI
	// and Anthropic refuse; the OpenAI Agents SDK sends a result with one
	// as JSON text, images in base64).
	Content []string `json:"content"`
}

// MCPContent are the MCP content blocks a tool result may carry besides
// text: "image" (plots, and read_file of an image), "resource_link" (one
// per file code wrote) and "resource" (read_file of a binary file,
// embedded).
var MCPContent = []string{"image", "resource_link", "resource"}

// CheckMCPContent checks a list of MCP content blocks (mcp.content, or
// an HTTP client's ?content=).
func CheckMCPContent(list []string) error {
	for _, c := range list {
		if !slices.Contains(MCPContent, c) {
			return fmt.Errorf("%w: %q is not a content block airlock sends: %s", errdefs.ErrInvalidArgument, c, strings.Join(MCPContent, ", "))
		}
	}
	return nil
}

// Pool configures the warm pools of pre-started sandboxes.
type Pool struct {
	// Size is the number of ready sandboxes kept per language whatever
	// the demand, as far as MemoryBudget holds them; 0 disables the pool
	// for that language.
	Size map[string]int `json:"size"`
	// OneShotSize is how many of a language's Size ready sandboxes
	// (or of fewer, when MemoryBudget cuts the sizes) one-shot runs and
	// programs may take; the rest are kept for session creations, so
	// that a burst of one-shots does not leave the sessions that follow
	// it to build their own. Sandboxes beyond Size (a pool grown by
	// demand) are open to both. Size or more keeps none apart.
	OneShotSize map[string]int `json:"oneshot_size"`
	// NetworkSize is the number of ready sandboxes kept per language for
	// sessions created with a network, on a kernel that fixes a
	// sandbox's network when it boots (gVisor); native sandboxes serve
	// both from Size. 0 (the default) builds those when asked.
	NetworkSize map[string]int `json:"network_size"`
	// Zygote enables the pre-imported Python template interpreter.
	Zygote bool `json:"zygote"`
	// LeanSize is the number of ready Python sandboxes kept for one-shot
	// runs whose code needs none of Preload (a conservative scan of the
	// code: only standard modules imported, nothing looked up by name),
	// forked from a second template interpreter that imports nothing:
	// such a sandbox costs a fraction of the CPU to fork, run and tear
	// down, and the code's result is the same. At most Size's Python;
	// needs Zygote and a Preload; 0 sends every one-shot to the full
	// template.
	LeanSize int `json:"lean_size"`
	// Preload lists the modules the Python template imports.
	Preload []string `json:"preload"`
	// WarmRuntimes makes every Python runtime forked from the template
	// (zygote) make a small pandas DataFrame and its sum, both formatted
	// as results are, before it waits in its pool: a session's first
	// pandas result comes several milliseconds sooner (its copy-on-write
	// faults taken beforehand), and every such runtime holds more
	// private memory, about 4 MB more while its session is idle. Off by
	// default.
	WarmRuntimes bool `json:"warm_runtimes"`
	// Parallel is the number of sandboxes built at once when refilling,
	// whatever the number requests are building for themselves.
	Parallel int `json:"parallel"`
	// MaxSize is the number of ready sandboxes a language's pool may grow
	// to while the demand of the last seconds asks for more than Size (a
	// burst of sessions or one-shots); it shrinks back to Size ShrinkAfter
	// after that demand. At most Size is kept when lower; a language
	// whose Size is 0 has no pool to grow.
	MaxSize map[string]int `json:"max_size"`
	// MemoryBudget caps the memory the ready sandboxes of every language
	// hold together, each counted at its processes' PSS (measured per
	// language once its pool is full). When the sizes alone exceed it,
	// each is scaled down alike (a language with a size keeps at least
	// one); growth beyond them gets what they leave, scaled down alike.
	// A template's pools (templates.pool) are not counted. 0 (the
	// default) takes a thirty-second of the memory sandboxes may use:
	// the host's, or the lowest cgroup memory limit above the sandboxes'
	// parent or the server itself when lower (a pod's), between 32M and
	// 4G (753M on the development machine, whose 24 GiB the kernel
	// reports as a MemTotal of 23.5 GiB; 64M under a 2 GiB limit).
	MemoryBudget Size `json:"memory_budget"`
	// ShrinkAfter is how long a pool grown by a burst keeps its size after
	// the demand that grew it has passed.
	ShrinkAfter Duration `json:"shrink_after"`
}

// Default returns the built-in configuration.
func Default() Config {
	return Config{
		StateDir:     "/run/airlock",
		CacheDir:     "/var/cache/airlock",
		LockDir:      "/run/airlock-locks",
		DataDir:      "/var/lib/airlock",
		CgroupParent: "airlock",
		IDBase:       1_000_000,
		Runtimes: Runtimes{
			Python:         "/usr/bin/python3",
			Bash:           "/usr/bin/bash",
			Node:           "/usr/bin/node",
			PythonPackages: []string{"numpy", "pandas", "matplotlib", "sklearn"},
		},
		Protections: Protections{Seccomp: Required, Landlock: Required},
		Isolation:   Native,
		GVisor:      GVisorConfig{Platform: "systrap"},
		Defaults:    DefaultLimits(),
		Max:         DefaultMaxLimits(),
		Server: Server{
			Listen:                  "127.0.0.1:8080",
			Auth:                    AuthKeys,
			MaxSessions:             512,
			MaxConcurrentExecutions: 64,
			QueueTimeout:            Duration(10 * time.Second),
			MaxBodyBytes:            8 << 20,
			MaxFileBytes:            256 << 20,
			IdleTimeout:             Duration(15 * time.Minute),
			MaxIdleTimeout:          Duration(24 * time.Hour),
			MaxSessionTimeout:       Duration(7 * 24 * time.Hour),
			InterruptGrace:          Duration(2 * time.Second),
			MaxEnv:                  128,
			MaxMetadata:             64,
			MaxConcurrentTransfers:  64,
			MaxSessionTransfers:     4,
			TransferStallTimeout:    Duration(30 * time.Second),
			MaxRichOutput:           32 << 20,
			MaxSessionCommands:      16,
			MaxSessionContexts:      8,
		},
		Network:     DefaultNetwork(),
		Ports:       DefaultPorts(),
		Packages:    DefaultPackages(),
		Store:       DefaultStore(),
		Templates:   DefaultTemplates(),
		Persistence: DefaultPersistence(),
		Broker:      DefaultBroker(),
		Audit:       Audit{Enabled: true, Code: "sha256", MaxAge: Duration(30 * 24 * time.Hour), MaxSize: 1 << 30, Queue: 4096, FlushInterval: Duration(50 * time.Millisecond), OnFailure: AuditRefuse, RefusalInterval: Duration(time.Minute)},
		MCP:         MCP{Enabled: true, SessionTimeout: Duration(30 * time.Minute), IdleTimeout: Duration(2 * time.Minute)},
		Metrics:     Metrics{Enabled: true},
		History:     DefaultHistory(),
		Console:     Console{Enabled: true},
		E2B:         E2B{Enabled: true},
		Log:         Log{Format: "text", Level: "info"},
		Pool: Pool{
			// 56 Python sandboxes (about 4 MB each when ready) are kept
			// for session creations: a burst of 50 right after one of
			// one-shots is served warm, as two cores cannot build them in
			// time (performance.md, "Pools that follow the load"). On a
			// small host the memory budget keeps fewer.
			Size:        map[string]int{"python": 64, "bash": 2, "javascript": 2},
			OneShotSize: map[string]int{"python": 8, "bash": 2, "javascript": 2},
			Zygote:      true,
			LeanSize:    8,
			Preload:     []string{"numpy", "pandas", "matplotlib", "matplotlib.pyplot"},
			Parallel:    runtime.NumCPU(),
			// A burst of 50 sessions after one of one-shots is served
			// warm once the pool has grown.
			MaxSize:     map[string]int{"python": 128, "bash": 16, "javascript": 16},
			ShrinkAfter: Duration(2 * time.Minute),
		},
	}
}

// Load builds the configuration from the file at path ($AIRLOCK_CONFIG
// when empty) and the process's environment (see Build).
func Load(path string) (Config, error) { return LoadEnv(path, os.Environ()) }

// LoadEnv is Load with the environment env (KEY=VALUE lines).
func LoadEnv(path string, env []string) (Config, error) {
	return Build(Sources{File: path, Env: env})
}

func openConfig(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{Problems: []string{fmt.Sprintf("cannot read the configuration file: %v", err)}}
	}
	return f, nil
}

// Decode strictly decodes JSON into v: unknown fields and trailing data
// are errors.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	// Not dec.More(): it reports false before a stray "]" or "}", which
	// would let `{...}]` through. Only the end of the input may follow.
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON value", errdefs.ErrInvalidArgument)
	}
	return nil
}

// SocketPath is the server's unix socket, "" when it is off.
func (c Config) SocketPath() string {
	switch c.Server.Socket {
	case "off":
		return ""
	case "":
		return filepath.Join(c.StateDir, "airlock.sock")
	}
	return c.Server.Socket
}

// Validate checks the configuration as a whole. Its error is an *Error,
// every problem naming its key.
func (c Config) Validate() error {
	var errs []error
	if p := c.Server.Socket; p != "" && p != "off" && (!filepath.IsAbs(p) || filepath.Clean(p) != p) {
		errs = append(errs, fmt.Errorf("server.socket %q must be a clean absolute path, or \"off\"", p))
	}
	if c.Version != 0 && c.Version != 1 {
		errs = append(errs, fmt.Errorf("version %d: this airlock reads configuration version 1", c.Version))
	}
	for name, p := range map[string]string{"state_dir": c.StateDir, "cache_dir": c.CacheDir, "data_dir": c.DataDir, "lock_dir": c.LockDir} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			errs = append(errs, fmt.Errorf("%s %q must be a clean absolute path other than /", name, p))
		}
	}
	if c.CgroupParent == "" || strings.Contains(c.CgroupParent, "..") || filepath.IsAbs(c.CgroupParent) ||
		filepath.Clean(c.CgroupParent) != c.CgroupParent {
		errs = append(errs, fmt.Errorf("cgroup_parent %q must be a clean relative path such as \"airlock\"", c.CgroupParent))
	}
	errs = append(errs, c.validateIDs()...)
	errs = append(errs, c.validateCluster()...)
	errs = append(errs, c.Store.validate()...)
	errs = append(errs, c.Persistence.validate()...)
	for name, p := range map[string]string{"python": c.Runtimes.Python, "bash": c.Runtimes.Bash, "node": c.Runtimes.Node} {
		if !strings.HasPrefix(p, "/usr/") || filepath.Clean(p) != p {
			errs = append(errs, fmt.Errorf("runtimes.%s %q must be a clean path under /usr, the only host tree sandboxes see", name, p))
		}
	}
	for name, m := range map[string]Mode{"seccomp": c.Protections.Seccomp, "landlock": c.Protections.Landlock} {
		if m != Required && m != Off {
			errs = append(errs, fmt.Errorf("protections.%s %q must be \"required\" or \"off\"", name, m))
		}
	}
	if !c.Isolation.Valid() {
		errs = append(errs, fmt.Errorf("isolation %q must be \"native\" or \"gvisor\"", c.Isolation))
	}
	for _, i := range c.AllowIsolation {
		if !i.Valid() {
			errs = append(errs, fmt.Errorf("allow_isolation: %q must be \"native\" or \"gvisor\"", i))
		}
	}
	if p := c.GVisor.Runsc; p != "" && (!filepath.IsAbs(p) || filepath.Clean(p) != p) {
		errs = append(errs, fmt.Errorf("gvisor.runsc %q must be a clean absolute path", p))
	}
	if c.GVisor.Checkpoint != nil && *c.GVisor.Checkpoint && !c.Persistence.Enabled {
		errs = append(errs, errors.New("gvisor.checkpoint needs persistence.enabled (a checkpoint is kept with a paused session)"))
	}
	if c.GVisor.PoolImage && c.GVisor.Checkpoint != nil && !*c.GVisor.Checkpoint {
		errs = append(errs, errors.New("gvisor.pool_image needs the keeper, which gvisor.checkpoint: false turns off (leave gvisor.checkpoint unset, or turn pool_image off)"))
	}
	if p := c.GVisor.Platform; p != "systrap" && p != "ptrace" {
		errs = append(errs, fmt.Errorf("gvisor.platform %q must be \"systrap\" or \"ptrace\"", p))
	}
	if err := ValidateLimits(c.Max); err != nil {
		errs = append(errs, fmt.Errorf("max: %v", err))
	}
	if _, err := Resolve(c.Defaults, c.Defaults, c.Max); err != nil {
		errs = append(errs, fmt.Errorf("defaults: %v", err))
	}
	s := c.Server
	if _, _, err := net.SplitHostPort(s.Listen); err != nil {
		errs = append(errs, fmt.Errorf("server.listen %q must be host:port", s.Listen))
	}
	switch s.Auth {
	case AuthKeys:
	case AuthNone:
		if !loopback(s.Listen) {
			errs = append(errs, fmt.Errorf("server.auth \"none\" is allowed only on a loopback listen address, not %q", s.Listen))
		}
	default:
		errs = append(errs, fmt.Errorf("server.auth %q must be \"keys\" or \"none\"", s.Auth))
	}
	for _, err := range []error{c.Metrics.validate(), c.Log.validate(), c.validatePolicy(), c.History.validate(), c.Ports.validate()} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Quotas.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("quotas: %v", err))
	}
	if a := c.Audit; a.RefusalInterval < Duration(time.Second) || a.RefusalInterval > Duration(time.Hour) {
		errs = append(errs, fmt.Errorf("audit.refusal_interval %s must be between 1s and 1h", a.RefusalInterval))
	}
	if a := c.Audit; a.OnFailure != AuditRefuse && a.OnFailure != AuditContinue {
		errs = append(errs, fmt.Errorf("audit.on_failure %q must be \"refuse\" or \"continue\"", a.OnFailure))
	}
	if a := c.Audit; a.Code != "full" && a.Code != "sha256" && a.Code != "none" {
		errs = append(errs, fmt.Errorf("audit.code %q must be \"full\", \"sha256\" or \"none\"", a.Code))
	}
	if a := c.Audit; a.MaxAge < 0 || a.MaxSize < 0 || a.Queue < 1 || a.Queue > 1<<20 || a.FlushInterval < 0 || a.FlushInterval > Duration(10*time.Second) {
		errs = append(errs, errors.New("audit.max_age and audit.max_size must not be negative (0: no bound), audit.queue between 1 and 1048576, audit.flush_interval between 0 and 10s"))
	}
	if s.MaxSessions < 1 || s.MaxConcurrentExecutions < 1 {
		errs = append(errs, errors.New("server.max_sessions and server.max_concurrent_executions must be at least 1"))
	}
	if s.MaxEnv < 0 || s.MaxMetadata < 0 {
		errs = append(errs, errors.New("server.max_env and server.max_metadata must not be negative"))
	}
	if s.MaxBodyBytes < 1024 || s.MaxFileBytes < 1 {
		errs = append(errs, errors.New("server.max_body_bytes must be at least 1K and server.max_file_bytes positive"))
	}
	if s.IdleTimeout <= 0 || s.MaxIdleTimeout < s.IdleTimeout {
		errs = append(errs, errors.New("server.idle_timeout must be positive and at most server.max_idle_timeout"))
	}
	if s.MaxSessionTimeout < Duration(time.Second) {
		errs = append(errs, errors.New("server.max_session_timeout must be at least 1s"))
	}
	if s.InterruptGrace <= 0 || s.QueueTimeout < 0 {
		errs = append(errs, errors.New("server.interrupt_grace must be positive and server.queue_timeout not negative"))
	}
	if s.MaxConcurrentTransfers < 1 || s.MaxSessionTransfers < 1 || s.MaxSessionTransfers > s.MaxConcurrentTransfers {
		errs = append(errs, errors.New("server.max_concurrent_transfers and server.max_session_transfers must be at least 1, the second at most the first"))
	}
	if s.TransferStallTimeout < Duration(time.Second) || s.TransferStallTimeout > Duration(time.Hour) {
		errs = append(errs, errors.New("server.transfer_stall_timeout must be between 1s and 1h"))
	}
	if c.MCP.SessionTimeout < Duration(time.Minute) || c.MCP.SessionTimeout > Duration(24*time.Hour) {
		errs = append(errs, errors.New("mcp.session_timeout must be between 1m and 24h"))
	}
	if err := CheckMCPContent(c.MCP.Content); err != nil {
		errs = append(errs, fmt.Errorf("mcp.content: %w", err))
	}
	if c.MCP.IdleTimeout < Duration(time.Second) || c.MCP.IdleTimeout > Duration(time.Hour) || c.MCP.IdleTimeout > c.MCP.SessionTimeout {
		errs = append(errs, errors.New("mcp.idle_timeout must be between 1s and 1h, and at most mcp.session_timeout"))
	}
	if s.MaxSessionCommands < 1 || s.MaxSessionCommands > 1024 {
		errs = append(errs, errors.New("server.max_session_commands must be between 1 and 1024"))
	}
	if s.MaxSessionPtys < 0 || s.MaxSessionPtys > 4096 {
		errs = append(errs, errors.New("server.max_session_ptys must be between 0 (derived) and 4096"))
	}
	if s.MaxPtys < 0 {
		errs = append(errs, errors.New("server.max_ptys must be at least 0 (0: what the kernel gives)"))
	} else if _, _, err := c.Ptys(0); s.MaxPtys > 0 && err != nil {
		errs = append(errs, err)
	}
	if s.MaxSessionContexts < 1 || s.MaxSessionContexts > 64 {
		errs = append(errs, errors.New("server.max_session_contexts must be between 1 and 64"))
	}
	if s.MaxRichOutput < 64<<10 || s.MaxRichOutput > 1<<30 {
		errs = append(errs, errors.New("server.max_rich_output must be between 64K and 1G"))
	}
	for key, sizes := range map[string]map[string]int{"size": c.Pool.Size, "oneshot_size": c.Pool.OneShotSize, "network_size": c.Pool.NetworkSize, "max_size": c.Pool.MaxSize} {
		for lang, n := range sizes {
			if !KnownLanguage(lang) {
				errs = append(errs, fmt.Errorf("pool.%s: unknown language %q", key, lang))
			}
			if n < 0 || n > 4096 {
				errs = append(errs, fmt.Errorf("pool.%s.%s %d must be between 0 and 4096", key, lang, n))
			}
		}
	}
	if err := c.Network.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Packages.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateTemplates()...)
	errs = append(errs, c.validateTools()...)
	if c.Pool.MemoryBudget < 0 || c.Pool.MemoryBudget > 1<<40 {
		errs = append(errs, fmt.Errorf("pool.memory_budget must be between 0 (automatic) and 1T"))
	}
	if c.Pool.ShrinkAfter < Duration(time.Second) || c.Pool.ShrinkAfter > Duration(24*time.Hour) {
		errs = append(errs, fmt.Errorf("pool.shrink_after must be between 1s and 24h"))
	}
	errs = append(errs, c.validateSecrets()...)
	if c.Pool.LeanSize < 0 || c.Pool.LeanSize > 4096 {
		errs = append(errs, fmt.Errorf("pool.lean_size %d must be between 0 and 4096", c.Pool.LeanSize))
	}
	if c.Pool.Parallel < 1 || c.Pool.Parallel > 256 {
		errs = append(errs, fmt.Errorf("pool.parallel %d must be between 1 and 256", c.Pool.Parallel))
	}
	for _, m := range c.Pool.Preload {
		if !validModuleName(m) {
			errs = append(errs, fmt.Errorf("pool.preload: %q is not a Python module name", m))
		}
	}
	var p problems
	for _, err := range errs {
		p.add("", err)
	}
	return p.err()
}

// idSpan is the number of host ids airlock may use above IDBase without
// id_count: two per sandbox slot. Slots below 2^22 are CLI runs (their
// pid), the server allocates from 2^22, tests from 2^23.
const idSpan = 2 * (1 << 24)

// Pod mode's bounds: a user-namespaced pod maps ids 0 to 65535; airlock
// leaves 0 (the pod's root) and the overflow ids 65534 and 65535 alone.
const (
	PodIDLimit  = 65534
	MinIDCount  = 64
	podIDLowest = 1
)

func (c Config) validateIDs() []error {
	if c.IDCount == 0 {
		if c.IDBase < 65536 || uint64(c.IDBase)+idSpan > 1<<31 {
			return []error{fmt.Errorf("id_base %d must be at least 65536 and leave room for %d ids below 2^31 (or set id_count for a smaller range)", c.IDBase, idSpan)}
		}
		return nil
	}
	var errs []error
	end := uint64(c.IDBase) + uint64(c.IDCount)
	switch {
	case c.IDCount < MinIDCount || c.IDCount%2 != 0:
		errs = append(errs, fmt.Errorf("id_count %d must be even and at least %d (two ids per sandbox)", c.IDCount, MinIDCount))
	case c.IDBase < podIDLowest:
		errs = append(errs, errors.New("id_base must not be 0: root is never a sandbox's id"))
	case c.IDBase < 65536 && end > PodIDLimit:
		errs = append(errs, fmt.Errorf("id_base %d + id_count %d must stay at or below %d: a user-namespaced pod maps 65,536 ids, the last two being the overflow ids", c.IDBase, c.IDCount, PodIDLimit))
	case end > 1<<31:
		errs = append(errs, fmt.Errorf("id_base %d + id_count %d must stay below 2^31", c.IDBase, c.IDCount))
	}
	// The server's part of the range (see jail.Layout: three quarters)
	// must hold every sandbox it may have at once.
	need := c.MaxSandboxes()
	if have := int(c.IDCount/2) - int(c.IDCount/8); len(errs) == 0 && have < need {
		errs = append(errs, fmt.Errorf("id_count %d gives the server %d sandboxes, fewer than server.max_sessions + server.max_concurrent_executions + the pools at their max_size + the template (%d)", c.IDCount, have, need))
	}
	return errs
}

func (c Config) validateCluster() []error {
	var errs []error
	cl := c.Cluster
	n := 0
	for _, v := range []string{cl.PodName, cl.PodNameFile, cl.PodNameEnv} {
		if v != "" {
			n++
		}
	}
	if n > 1 {
		errs = append(errs, errors.New("cluster: set one of pod_name, pod_name_file and pod_name_env"))
	}
	if cl.PodName != "" {
		if err := ValidPodName(cl.PodName); err != nil {
			errs = append(errs, fmt.Errorf("cluster.pod_name: %v", err))
		}
	}
	if p := cl.PodNameFile; p != "" && (!filepath.IsAbs(p) || filepath.Clean(p) != p) {
		errs = append(errs, fmt.Errorf("cluster.pod_name_file %q must be a clean absolute path", p))
	}
	if e := cl.PodNameEnv; e != "" && !validEnvName(e) {
		errs = append(errs, fmt.Errorf("cluster.pod_name_env %q is not an environment variable name", e))
	}
	return errs
}

// ValidPodName checks a server's name in a cluster: a DNS label (what
// Kubernetes' pod names of a StatefulSet are), so that session ids, the
// router's rule and DNS names agree. It has no dot: ids use dots to part
// the name from the rest.
func ValidPodName(name string) error {
	if name == "" || len(name) > 63 {
		return fmt.Errorf("%q must be 1 to 63 characters", name)
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		ok := ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' && i > 0 && i < len(name)-1
		if !ok {
			return fmt.Errorf("%q must be a DNS label: lower-case letters, digits and inner dashes", name)
		}
	}
	return nil
}

func validEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !(ch == '_' || ch >= 'A' && ch <= 'Z' || ch >= 'a' && ch <= 'z' || i > 0 && ch >= '0' && ch <= '9') {
			return false
		}
	}
	return s != ""
}

// Languages airlock can run.
var Languages = []string{"python", "bash", "javascript"}

// KnownLanguage reports whether lang is one of Languages.
func KnownLanguage(lang string) bool {
	for _, l := range Languages {
		if l == lang {
			return true
		}
	}
	return false
}

func validModuleName(m string) bool {
	if m == "" || len(m) > 128 {
		return false
	}
	for _, part := range strings.Split(m, ".") {
		if part == "" {
			return false
		}
		for i, r := range part {
			ok := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
			if !ok {
				return false
			}
		}
	}
	return true
}
