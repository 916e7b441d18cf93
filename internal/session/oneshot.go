package session

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
	"airlock/internal/instance"
	"airlock/internal/packages"
	"airlock/internal/runtimes"
	"airlock/internal/secrets"
	"airlock/internal/workspace"
)

// Caps on a program's arguments.
const (
	MaxArgs     = 4096
	MaxArgBytes = 256 << 10
)

// RunOnce runs code once in a fresh jail and returns what it printed,
// displayed and wrote.
func (m *Manager) RunOnce(ctx context.Context, req apitype.OneShotRequest, emit func(apitype.Event)) (*apitype.OneShotResult, error) {
	release, err := m.admitExecution(ctx, &Ask{Limits: &req.Limits, Isolation: &req.Isolation, Network: req.Network, Template: req.Template})
	if err != nil {
		return nil, err
	}
	defer release()
	return m.runOnce(ctx, req, endFirst(emit, release))
}

func (m *Manager) runOnce(ctx context.Context, req apitype.OneShotRequest, emit func(apitype.Event)) (*apitype.OneShotResult, error) {
	if len(req.Code) > MaxCode {
		return nil, fmt.Errorf("%w: code is larger than %d bytes", errdefs.ErrTooLarge, MaxCode)
	}
	o, err := m.prepareOneShot(ctx, req.Language, req.Isolation, req.Template, req.Limits, req.Env, req.Files, req.Network, req.Tools, req.Secrets)
	if err != nil {
		return nil, err
	}
	if len(req.Packages) > 0 {
		if o.manager, err = m.checkPackages(o.rt, req.Packages); err != nil {
			return nil, err
		}
		o.packages = req.Packages
	}
	if o.runtimeEnv, err = o.brokered(m.proxyEnv(sessionEnv(o.rt, o.limits, o.env), o.policy)); err != nil {
		return nil, err
	}
	o.leanable = len(o.files) == 0 && len(o.packages) == 0 && len(o.tools) == 0
	return m.oneShot(ctx, o, request{code: req.Code, timeout: o.limits.Timeout.D(), kind: ExecOneShot, inBytes: o.inputBytes()}, emit, true, nil)
}

// RunProgram runs a program once in a fresh jail and returns its exit
// status, output and files, as `airlock run` reports them. A pooled
// runtime runs it (a Python one in its own, already warm interpreter), so
// it starts in about a millisecond. Output that is not UTF-8 streams as
// data_base64.
func (m *Manager) RunProgram(ctx context.Context, req apitype.ProgramRequest, emit func(apitype.Event)) (*apitype.OneShotResult, error) {
	return m.RunProgramTo(ctx, req, emit, nil)
}

// FileSink receives each file a one-shot program created or modified,
// after it ended and before its sandbox goes: the name the result gives
// it, and open, which reads it through the workspace handle (links never
// followed). An in-process caller takes the files this way, whatever
// their size, instead of in the result.
type FileSink func(name string, open func() (io.ReadCloser, error))

// RunProgramTo is RunProgram whose files go to sink (nil: in the result,
// as req.FileContents says).
func (m *Manager) RunProgramTo(ctx context.Context, req apitype.ProgramRequest, emit func(apitype.Event), sink FileSink) (*apitype.OneShotResult, error) {
	release, err := m.admitExecution(ctx, &Ask{Limits: &req.Limits, Isolation: &req.Isolation, Network: req.Network, Template: req.Template})
	if err != nil {
		return nil, err
	}
	defer release()
	return m.runProgram(ctx, req, endFirst(emit, release), sink)
}

func (m *Manager) runProgram(ctx context.Context, req apitype.ProgramRequest, emit func(apitype.Event), sink FileSink) (*apitype.OneShotResult, error) {
	if len(req.Code) > MaxCode {
		return nil, fmt.Errorf("%w: the program is larger than %d bytes", errdefs.ErrTooLarge, MaxCode)
	}
	if len(req.Args) > MaxArgs {
		return nil, fmt.Errorf("%w: more than %d arguments", errdefs.ErrInvalidArgument, MaxArgs)
	}
	size := 0
	for _, a := range req.Args {
		size += len(a) + 1
		if strings.ContainsRune(a, 0) {
			return nil, fmt.Errorf("%w: arguments must not contain NUL", errdefs.ErrInvalidArgument)
		}
	}
	if size > MaxArgBytes {
		return nil, fmt.Errorf("%w: the arguments are larger than %d bytes", errdefs.ErrInvalidArgument, MaxArgBytes)
	}
	o, err := m.prepareOneShot(ctx, req.Language, req.Isolation, req.Template, req.Limits, req.Env, req.Files, req.Network, req.Tools, req.Secrets)
	if err != nil {
		return nil, err
	}
	name := req.Filename
	if name == "" {
		name = "main" + o.rt.Ext
	}
	if name, err = workspace.Clean(name); err != nil || name == "" {
		return nil, fmt.Errorf("%w: filename %q: want a file name in /workspace", errdefs.ErrInvalidArgument, req.Filename)
	}
	for _, f := range o.files {
		if f.path == name {
			return nil, fmt.Errorf("%w: files: %s is the program's own file name", errdefs.ErrInvalidArgument, name)
		}
	}
	o.files = append(o.files, inputFile{name, []byte(req.Code)})
	env := runtimes.EnvMap(instance.ProgramEnv(o.rt, o.limits))
	fresh := false
	for k, v := range req.Env {
		env[k] = v
		fresh = fresh || (o.rt.FreshEnvPrefix != "" && strings.HasPrefix(k, o.rt.FreshEnvPrefix))
	}
	if len(req.Packages) > 0 {
		if o.manager, err = m.checkPackages(o.rt, req.Packages); err != nil {
			return nil, err
		}
		o.packages = req.Packages
		// Maybe a new interpreter, with the installed site first.
		if packages.ProgramEnv(o.manager, env) {
			fresh = true
		}
	}
	if env, err = o.brokered(env); err != nil {
		return nil, err
	}
	// A warm interpreter has its own sys.path: the tools' client is on
	// a fresh one's, through PYTHONPATH.
	fresh = fresh || len(o.tools) > 0
	prog := &instance.Program{
		Argv:  append(o.rt.Command("/workspace/"+name), req.Args...),
		Env:   env,
		Fresh: fresh,
	}
	// The runtime gets the program's environment first too: the round trip
	// also proves it alive, and a pooled one that died is replaced.
	o.runtimeEnv = env
	o.leanable = len(o.files) == 1 && len(o.packages) == 0 && !fresh
	contents := sink == nil && (req.FileContents == nil || *req.FileContents)
	return m.oneShot(ctx, o, request{timeout: o.limits.Timeout.D(), prog: prog, kind: ExecProgram, source: req.Code, inBytes: o.inputBytes()}, emit, contents, sink)
}

// inputBytes is the size of the files a one-shot request sent.
func (o *oneShotPlan) inputBytes() int64 {
	var n int64
	for _, f := range o.files {
		n += int64(len(f.data))
	}
	return n
}

// writeFiles writes the request's files into ws.
func (o *oneShotPlan) writeFiles(ws *workspace.Dir) error {
	for _, f := range o.files {
		if _, err := ws.Write(f.path, bytes.NewReader(f.data), int64(len(f.data)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

type inputFile struct {
	path string
	data []byte
}

// oneShotPlan is a checked one-shot request.
type oneShotPlan struct {
	iso    config.Isolation
	tmpl   string
	rt     runtimes.Runtime
	limits config.Limits
	env    map[string]string
	files  []inputFile
	// runtimeEnv configures the runtime before the execution.
	runtimeEnv map[string]string
	// policy is the run's egress allowlist (empty: loopback only).
	policy egress.Policy
	// packages are installed before the run, by manager.
	packages []string
	manager  string
	// tools and secrets the run opted in to, of tenant's.
	tenant  string
	tools   []string
	secrets *secrets.Session
	// leanable: the code is all the run brings (no other files, no
	// packages, no tools), so that what it imports can be read from it
	// (runtimes.Language.Lean).
	leanable bool
}

// brokered adds what the run's tools and secrets need to env.
func (o *oneShotPlan) brokered(env map[string]string) (map[string]string, error) {
	if len(o.tools) > 0 {
		env = toolsEnv(env)
	}
	return secretsEnv(env, o.env, o.secrets)
}

// net reports whether the run's sandbox needs a network namespace.
func (o *oneShotPlan) net() bool { return !o.policy.Empty() || len(o.tools) > 0 || o.secrets != nil }

func (m *Manager) prepareOneShot(ctx context.Context, lang string, iso config.Isolation, tmpl string, req config.Limits, env map[string]string, in []apitype.InputFile, network *apitype.NetworkPolicy, tools, secretNames []string) (*oneShotPlan, error) {
	rt, err := m.lookup(lang)
	if err != nil {
		return nil, err
	}
	if iso, err = m.isolation(iso); err != nil {
		return nil, err
	}
	if tmpl, err = m.template(tmpl); err != nil {
		return nil, err
	}
	limits, err := config.Resolve(req, m.cfg.Defaults, m.cfg.Max)
	if err != nil {
		return nil, err
	}
	if err := ValidateEnv(env, m.cfg.Server.MaxEnv); err != nil {
		return nil, err
	}
	policy, err := m.NetworkPolicy(network)
	if err != nil {
		return nil, err
	}
	o := &oneShotPlan{iso: iso, tmpl: tmpl, rt: rt, limits: limits, env: env, policy: policy, tenant: callerOf(ctx).Tenant}
	if o.tools, err = m.resolveTools(o.tenant, tools); err != nil {
		return nil, err
	}
	if o.secrets, err = m.resolveSecrets(o.tenant, secretNames); err != nil {
		return nil, err
	}
	total := int64(0)
	seen := map[string]bool{}
	for i, f := range in {
		p, err := workspace.Clean(f.Path)
		if err != nil {
			return nil, err
		}
		if p == "" {
			return nil, fmt.Errorf("%w: files[%d]: empty path", errdefs.ErrInvalidArgument, i)
		}
		if seen[p] {
			return nil, fmt.Errorf("%w: files[%d]: %s is given twice", errdefs.ErrInvalidArgument, i, p)
		}
		seen[p] = true
		data := []byte(f.Content)
		if f.ContentBase64 != "" {
			if f.Content != "" {
				return nil, fmt.Errorf("%w: files[%d]: give content or content_base64, not both", errdefs.ErrInvalidArgument, i)
			}
			if data, err = base64.StdEncoding.DecodeString(f.ContentBase64); err != nil {
				return nil, fmt.Errorf("%w: files[%d]: content_base64: %v", errdefs.ErrInvalidArgument, i, err)
			}
		}
		total += int64(len(data))
		if int64(len(data)) > int64(m.cfg.Server.MaxFileBytes) || total > int64(limits.Disk) {
			return nil, fmt.Errorf("%w: files[%d]: the files exceed the file size or disk limit", errdefs.ErrTooLarge, i)
		}
		o.files = append(o.files, inputFile{p, data})
	}
	return o, nil
}

// oneShot runs one execution in a fresh session and returns the result
// with the files it created or modified. The response does not wait for
// the jail's teardown, nor does the execution slot; the one-shot's
// teardown slot does, so a burst of requests cannot outrun the cleanup,
// and the teardowns hold no slot the executions that follow need.
func (m *Manager) oneShot(ctx context.Context, o *oneShotPlan, req request, emit func(apitype.Event), contents bool, sink FileSink) (*apitype.OneShotResult, error) {
	// Code rules first: denied code builds no jail.
	req.who = callerOf(ctx)
	code := req.code
	if req.prog != nil {
		code = req.source
	}
	flags, err := m.screen(req.who.Tenant, ExecutionEvent{Caller: req.who, Kind: req.kind, Language: o.rt.Lang, Code: code, InputBytes: req.inBytes})
	if err != nil {
		return nil, err
	}
	req.flags, req.screened = flags, true
	// Take the slots first: a burst of one-shot requests must queue
	// before it builds jails, not after. Both within one queue timeout
	// (server.queue_timeout), not one each.
	wait, stopWait := m.queueWait()
	freeTeardown, err := m.acquireTeardownBy(ctx, wait)
	if err != nil {
		stopWait()
		return nil, err
	}
	release, err := m.acquireBy(ctx, wait)
	stopWait()
	if err != nil {
		freeTeardown()
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		release()
		freeTeardown()
		return nil, fmt.Errorf("%w: the server is shutting down", errdefs.ErrUnavailable)
	}
	m.bg.Add(1) // under mu: Close waits only after it set closed
	m.mu.Unlock()
	// Marked, so that a burst of one-shots leaves the pool's sandboxes
	// kept for session creations (pool.oneshot_size). A sandbox built for
	// the request gets its files while its runtime starts; any other (a
	// pool's) gets them below.
	var wrote *workspace.Dir
	writeInputs := func(ws *workspace.Dir) error {
		if err := o.writeFiles(ws); err != nil {
			return err
		}
		wrote = ws
		return nil
	}
	sctx := instance.WithInputs(instance.ForOneShot(ctx), writeInputs)
	if o.leanable && o.rt.Lean != nil && o.rt.Lean(code) {
		// A speed hint: a sandbox whose runtime preloaded nothing does.
		sctx = instance.ForLean(sctx)
		if req.prog != nil && o.rt.LeanProgram != nil && o.rt.LeanProgram(code) {
			sctx = instance.ForLeanProgram(sctx)
		}
	}
	s, err := m.start(sctx, o.iso, o.tmpl, o.rt, o.limits, o.runtimeEnv, time.Hour, o.policy, o.net(), o.secrets)
	if err != nil {
		m.bg.Done()
		release()
		freeTeardown()
		return nil, err
	}
	// Registered so that Close ends it with the sessions; if Close came
	// first, it is ended here and the execution below says so.
	m.mu.Lock()
	closed := m.closed
	if !closed {
		m.oneShots[s] = struct{}{}
	}
	m.mu.Unlock()
	if closed {
		s.terminate(apitype.Ended(apitype.EndShutdown))
	}
	defer func() {
		release()
		go func() {
			defer m.bg.Done()
			m.yieldTeardown(s)
			s.terminate(apitype.Ended(apitype.EndFinished))
			<-s.gone
			m.tornDown(s)
			freeTeardown()
		}()
	}()
	if len(o.tools) > 0 {
		if err := s.attachTools(o.tenant, o.tools); err != nil {
			return nil, err
		}
	}
	if ws := s.workspace(); ws != wrote {
		if err := o.writeFiles(ws); err != nil {
			return nil, err
		}
	}
	if len(o.packages) > 0 {
		if _, err := s.install(ctx, apitype.PackagesRequest{Manager: o.manager, Packages: o.packages}, true); err != nil {
			return nil, err
		}
	}
	// The final event carries the files too, so it is sent here.
	var inner func(apitype.Event)
	if emit != nil {
		inner = func(e apitype.Event) {
			if e.Type != apitype.EventEnd {
				emit(e)
			}
		}
	}
	var changes []apitype.FileChange // the result's, with their real paths
	req.changes = &changes
	res, err := s.execute(ctx, req, inner, true)
	if err != nil {
		return nil, err
	}
	out := &apitype.OneShotResult{Result: res, Files: []apitype.OutputFile{}, Limits: &o.limits}
	budget := int64(apitype.MaxOneShotFiles)
	for i, c := range changes {
		if c.Change == apitype.Deleted {
			continue
		}
		// The name the result gives (redacted), the content of the file.
		of := apitype.OutputFile{Path: res.FilesChanged[i].Path, Size: c.Size}
		if sink != nil {
			sink(of.Path, func() (io.ReadCloser, error) {
				f, _, err := s.workspace().Open(c.Path)
				return f, err
			})
		}
		switch {
		case !contents:
		case c.Size > budget:
			of.Omitted = true
		default:
			if f, _, err := s.workspace().Open(c.Path); err == nil {
				data, err := io.ReadAll(io.LimitReader(f, budget+1))
				f.Close()
				if err == nil && int64(len(data)) <= budget {
					// What was read: a process left behind may still be
					// changing the file.
					of.Size = int64(len(data))
					of.ContentBase64 = base64.StdEncoding.EncodeToString(data)
					budget -= int64(len(data))
				} else {
					of.Omitted = true
				}
			} else {
				of.Omitted = true
			}
		}
		out.Files = append(out.Files, of)
	}
	if emit != nil {
		emit(apitype.Event{Type: apitype.EventEnd, Result: res, Files: out.Files, Limits: out.Limits})
	}
	return out, nil
}
