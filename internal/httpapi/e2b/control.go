package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
	"airlock/internal/identity"
	"airlock/internal/session"
)

// route is one operation: work marks those the audit log records (while
// it cannot write they are refused, as the v1 API's are).
type route struct {
	pattern string
	h       func(*Server, http.ResponseWriter, *http.Request)
	work    bool
}

func (s *Server) routes() {
	s.mount(s.control, []route{
		{"POST /sandboxes", (*Server).create, true},
		{"POST /v2/sandboxes", (*Server).create, true},
		{"GET /sandboxes", (*Server).list, false},
		{"GET /v2/sandboxes", (*Server).list, false},
		{"GET /sandboxes/{id}", (*Server).get, false},
		{"DELETE /sandboxes/{id}", (*Server).kill, false},
		{"POST /sandboxes/{id}/timeout", (*Server).setTimeout, false},
		{"POST /sandboxes/{id}/refreshes", (*Server).refresh, false},
		{"POST /sandboxes/{id}/connect", (*Server).connect, false},
		{"POST /v2/sandboxes/{id}/connect", (*Server).connect, false},
		{"POST /sandboxes/{id}/resume", (*Server).connect, false},
		{"POST /sandboxes/{id}/pause", (*Server).pause, true},
	}, false)
	s.control.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		failControl(w, fmt.Errorf("%w: %s %s is an E2B feature airlock does not have (snapshots, volumes, templates are airlock's own: see docs/guides/e2b.md)", errdefs.ErrUnsupported, r.Method, httpapi.Truncate(r.URL.Path)))
	})
	s.mount(s.data, []route{
		{"POST /execute", (*Server).execute, true},
		{"/contexts", (*Server).contexts, true},
		{"/contexts/", (*Server).contexts, true},
		{"GET /files", (*Server).download, true},
		{"POST /files", (*Server).upload, true},
		{"POST /filesystem.Filesystem/{method}", (*Server).filesystem, true},
		{"POST /process.Process/{method}", (*Server).process, true},
	}, true)
}

// mount serves routes on mux; a data-plane route keeps its sandbox's
// session from idling.
func (s *Server) mount(mux *http.ServeMux, routes []route, data bool) {
	for _, rt := range routes {
		mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) {
			httpapi.Routed(w, r)
			if rt.work {
				if err := s.edge.Work(); err != nil {
					if rpc(r) {
						failRPC(w, r, err)
					} else {
						failControl(w, err)
					}
					return
				}
			}
			if data {
				sess, _ := sessionOf(r)
				sess.Touch()
			}
			rt.h(s, w, r)
		})
	}
}

// createRequest is E2B's NewSandbox: what airlock does not do is refused
// by name; what it does not need (secure) is ignored.
type createRequest struct {
	TemplateID string            `json:"templateID"`
	Timeout    *int64            `json:"timeout"` // seconds
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
	// AutoPause pauses the sandbox at its timeout (persistence), as
	// Lifecycle's onTimeout "pause" does; AutoResume ({enabled} or a
	// bool) resumes it when its data plane is called.
	AutoPause       *bool           `json:"autoPause"`
	AutoPauseMemory *bool           `json:"autoPauseMemory"`
	AutoResume      json.RawMessage `json:"autoResume"`
	Lifecycle       *lifecycleJSON  `json:"lifecycle"`
	MCP             json.RawMessage `json:"mcp"`
	Network         *struct {
		AllowOut []string `json:"allowOut"`
	} `json:"network"`
	VolumeMounts json.RawMessage `json:"volumeMounts"`
}

// sandboxJSON is E2B's Sandbox, SandboxDetail and ListedSandbox in one.
type sandboxJSON struct {
	TemplateID         string            `json:"templateID"`
	SandboxID          string            `json:"sandboxID"`
	ClientID           string            `json:"clientID"`
	Alias              string            `json:"alias,omitempty"`
	EnvdVersion        string            `json:"envdVersion"`
	EnvdAccessToken    string            `json:"envdAccessToken,omitempty"`
	TrafficAccessToken string            `json:"trafficAccessToken,omitempty"`
	Domain             *string           `json:"domain"`
	StartedAt          *time.Time        `json:"startedAt,omitempty"`
	EndAt              *time.Time        `json:"endAt,omitempty"`
	CPUCount           *float64          `json:"cpuCount,omitempty"`
	MemoryMB           *int64            `json:"memoryMB,omitempty"`
	DiskSizeMB         *int64            `json:"diskSizeMB,omitempty"`
	Metadata           map[string]string `json:"metadata,omitempty"`
	State              string            `json:"state,omitempty"`
	Lifecycle          *lifecycleJSON    `json:"lifecycle,omitempty"`
}

// lifecycleJSON is E2B's sandbox lifecycle: onTimeout "kill" or "pause".
type lifecycleJSON struct {
	OnTimeout  string `json:"onTimeout,omitempty"`
	AutoResume *bool  `json:"autoResume,omitempty"`
}

// lifecycle is what create asks of a sandbox's timeout: pause (instead
// of kill) and auto-resume, which need persistence.enabled; restores
// what that pause keeps (autoPauseMemory, the SDK's onTimeout
// keepMemory): RestoreMemory, which the session layer checks against the
// session made, RestoreFiles (false: its files only, as E2B's
// filesystem-only snapshot), or "" (unset: what the session's pauses
// keep).
func (s *Server) lifecycle(req createRequest) (pause, auto bool, restores string, err error) {
	pause = req.AutoPause != nil && *req.AutoPause
	if l := req.Lifecycle; l != nil {
		switch l.OnTimeout {
		case "", "kill":
		case "pause":
			pause = true
		default:
			return false, false, "", fmt.Errorf("%w: lifecycle.onTimeout %q: want \"kill\" or \"pause\"", errdefs.ErrInvalidArgument, httpapi.Truncate(l.OnTimeout))
		}
		auto = l.AutoResume != nil && *l.AutoResume
	}
	if raw := bytes.TrimSpace(req.AutoResume); len(raw) > 0 && string(raw) != "null" {
		var on struct {
			Enabled bool `json:"enabled"`
		}
		if json.Unmarshal(raw, &on.Enabled) != nil && json.Unmarshal(raw, &on) != nil {
			return false, false, "", fmt.Errorf("%w: autoResume: want {\"enabled\": bool}", errdefs.ErrInvalidArgument)
		}
		auto = auto || on.Enabled
	}
	memory := req.AutoPauseMemory != nil && *req.AutoPauseMemory
	filesOnly := req.AutoPauseMemory != nil && !*req.AutoPauseMemory
	switch {
	case (pause || auto) && !s.cfg.Persistence.Enabled:
		return false, false, "", fmt.Errorf("%w: autoPause, lifecycle.onTimeout \"pause\" and autoResume need persistence, which this server's operator has not enabled (persistence.enabled); a sandbox ends at its timeout", errdefs.ErrInvalidArgument)
	case auto && !pause:
		return false, false, "", fmt.Errorf("%w: autoResume needs lifecycle.onTimeout \"pause\"", errdefs.ErrInvalidArgument)
	case req.AutoPauseMemory != nil && !pause:
		return false, false, "", fmt.Errorf("%w: autoPauseMemory needs lifecycle.onTimeout \"pause\"", errdefs.ErrInvalidArgument)
	case filesOnly && auto:
		// As E2B's API: a filesystem-only pause is resumed by connect,
		// never by traffic that would meet a restarted interpreter.
		return false, false, "", fmt.Errorf("%w: autoResume cannot be combined with keepMemory false (autoPauseMemory): a sandbox paused with its files only must be resumed explicitly with Sandbox.connect()", errdefs.ErrInvalidArgument)
	}
	switch {
	case memory:
		// Known before any sandbox is made: none is built to be refused.
		if err := s.refusesMemory(req); err != nil {
			return false, false, "", err
		}
		return pause, auto, apitype.RestoreMemory, nil
	case filesOnly:
		return pause, auto, apitype.RestoreFiles, nil
	}
	return pause, auto, "", nil
}

// refusesMemory is keepMemory's refusal where the request and the
// server's configuration alone say a pause cannot keep the memory.
func (s *Server) refusesMemory(req createRequest) error {
	if s.cfg.Isolation != apitype.GVisor {
		return noMemory(fmt.Sprintf("this server runs sandboxes natively (isolation %q): memory is kept under gVisor only", s.cfg.Isolation))
	}
	if _, ok := languages[req.TemplateID]; !ok {
		return noMemory("it is made from a template")
	}
	if req.Network != nil && len(req.Network.AllowOut) > 0 {
		return noMemory("it has a network (network.allowOut), whose connections cannot be kept")
	}
	if on, why := s.cfg.GVisorCheckpoint(); !on {
		return noMemory("this server's gVisor pauses keep files only: " + why)
	}
	return nil
}

// keepMemoryErr is err in keepMemory's words when the session layer
// refused a request for memory (a *session.NoMemoryError).
func keepMemoryErr(err error) error {
	var nm *session.NoMemoryError
	if errors.As(err, &nm) {
		return noMemory(nm.Why)
	}
	return err
}

// noMemory is keepMemory's refusal, saying why.
func noMemory(why string) error {
	return fmt.Errorf("%w: keepMemory: a pause of this sandbox keeps its files, not its memory (the interpreter restarts on resume): %s; leave keepMemory unset or false", errdefs.ErrInvalidArgument, why)
}

// maxMetadata bounds a sandbox's metadata (E2B keeps it for listings).
const maxMetadata = 64

// languages maps E2B's templates to airlock's languages; any other
// template names one of airlock's (a Python session on it).
var languages = map[string]string{
	"": apitype.Python, "base": apitype.Python, "code-interpreter-v1": apitype.Python, "code-interpreter": apitype.Python,
	"python": apitype.Python, "javascript": apitype.JavaScript, "js": apitype.JavaScript, "nodejs": apitype.JavaScript,
	"bash": apitype.Bash,
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := s.decode(w, r, &req); err != nil {
		failControl(w, err)
		return
	}
	switch {
	case len(req.MCP) > 0 && string(req.MCP) != "null":
		failControl(w, fmt.Errorf("%w: mcp: E2B's MCP gateway is not airlock's; airlock serves MCP itself at /mcp", errdefs.ErrInvalidArgument))
		return
	case len(req.VolumeMounts) > 0 && string(req.VolumeMounts) != "null" && string(req.VolumeMounts) != "[]":
		failControl(w, fmt.Errorf("%w: volumeMounts: airlock has no volumes; upload files instead", errdefs.ErrInvalidArgument))
		return
	case len(req.Metadata) > maxMetadata:
		failControl(w, fmt.Errorf("%w: metadata has %d entries, more than %d", errdefs.ErrInvalidArgument, len(req.Metadata), maxMetadata))
		return
	}
	pause, auto, restores, err := s.lifecycle(req)
	if err != nil {
		failControl(w, err)
		return
	}
	ttl, err := s.ttl(req.Timeout)
	if err != nil {
		failControl(w, err)
		return
	}
	cr := apitype.CreateSessionRequest{Env: req.EnvVars, Metadata: req.Metadata, IdleTimeout: apitype.Duration(s.cfg.Server.MaxIdleTimeout)}
	if pause {
		// The session's own lifetime pauses it (see deadline).
		cr.Timeout, cr.OnTimeout, cr.AutoResume, cr.OnTimeoutRestores = apitype.Duration(ttl), apitype.OnTimeoutPause, auto, restores
	}
	lang, ok := languages[req.TemplateID]
	if ok {
		cr.Language = lang
	} else {
		cr.Language, cr.Template = apitype.Python, req.TemplateID
	}
	if req.Network != nil && len(req.Network.AllowOut) > 0 {
		cr.Network = &apitype.NetworkPolicy{Allow: req.Network.AllowOut}
	}
	sess, err := s.m.Create(r.Context(), cr)
	if err != nil {
		failControl(w, keepMemoryErr(err))
		return
	}
	who, _ := identity.From(r.Context())
	rec := record{Template: req.TemplateID, Owner: who, Metadata: req.Metadata, Started: time.Now().UTC(), Pause: pause, AutoResume: auto}
	if rec.Template == "" {
		rec.Template = "base"
	}
	box := s.newBox(sess.ID(), rec)
	err = s.save(r.Context(), box)
	if err == nil && s.Register != nil {
		err = s.Register(r.Context(), sess.Info())
	}
	if err != nil {
		// A sandbox whose record is not kept would lose its tokens with
		// a restart, one the directory does not list would be unknown
		// to the cluster: none is made (its end frees the quota's place).
		s.m.Discard(context.WithoutCancel(r.Context()), box.id)
		s.unrecord(box.id)
		failControl(w, err)
		return
	}
	s.mu.Lock()
	s.boxes[box.id] = box
	s.mu.Unlock()
	// Nobody else knows the sandbox yet: its session takes the timeout
	// (create checked it).
	s.deadline(box, ttl, true)
	// E2B's Python SDK reads only a 201.
	httpapi.WriteJSON(w, http.StatusCreated, s.describe(box, true))
}

// ttl is a sandbox's timeout as asked (seconds), E2B's 300 s by default,
// at most the server's max_idle_timeout.
func (s *Server) ttl(asked *int64) (time.Duration, error) {
	if asked == nil || *asked == 0 {
		return min(defaultTTL, s.cfg.Server.MaxIdleTimeout.D()), nil
	}
	max := s.cfg.Server.MaxIdleTimeout.D()
	if *asked < 0 || *asked > int64(max/time.Second) {
		return 0, fmt.Errorf("%w: timeout %d s must be between 1 s and the server maximum %d s (server.max_idle_timeout)", errdefs.ErrInvalidArgument, *asked, int64(max/time.Second))
	}
	return time.Duration(*asked) * time.Second, nil
}

// deadline ends box's session ttl from now; unless set, only a later end
// replaces an earlier one (connect and refreshes extend, set_timeout
// sets). A timeout the session does not take (it is being paused) is an
// error, and box's end stays as it was.
func (s *Server) deadline(box *sandbox, ttl time.Duration, set bool) error {
	end := time.Now().Add(ttl)
	box.mu.Lock()
	defer box.mu.Unlock()
	if !set && end.Before(box.end) {
		return nil
	}
	if box.pause {
		// The session's lifetime, which pauses it: set at creation, set
		// again here (a paused one's is set when it resumes).
		if sess, err := s.m.Get(box.id); err == nil {
			if err := sess.SetTimeout(ttl); err != nil && !errors.Is(err, errdefs.ErrPaused) && !errors.Is(err, errdefs.ErrGone) {
				return err
			}
		}
		box.end = end
		return nil
	}
	box.end = end
	if box.timer != nil {
		box.timer.Stop()
	}
	id := box.id
	box.timer = time.AfterFunc(ttl, func() { s.expire(id) })
	return nil
}

// expire ends sandbox id at its timeout, unless it is paused: a pause
// stops its timeout, and one that came just before the timer fired
// (before pause could stop it) wins; its sandbox stays then. So does
// one the server's shutdown ended keeping its recovery point, before
// Get or after it (EndUnlessPaused says so): listed paused after the
// restart, it needs its record.
func (s *Server) expire(id string) {
	sess, err := s.m.Get(id)
	switch {
	case errors.Is(err, errdefs.ErrPaused):
		return
	case err == nil && !sess.EndUnlessPaused(apitype.Ended(apitype.EndDeleted)):
		return
	case s.m.KeptAtShutdown(err):
		// Listed paused after the restart: its timeout stopped.
		return
	}
	s.forget(id)
}

// describe is box as E2B's API shows it; with secrets, its tokens too
// (its creator's and connect's answers).
func (s *Server) describe(box *sandbox, secrets bool) sandboxJSON {
	out := box.base()
	if d := s.cfg.Ports.Domain; d != "" && s.cfg.Ports.Enabled {
		out.Domain = &d // getHost's: <port>-<id>.<domain>
	}
	if secrets {
		out.EnvdAccessToken, out.TrafficAccessToken = box.envdToken, box.traffic
	}
	started := box.started
	box.mu.Lock()
	end := box.end.UTC()
	box.mu.Unlock()
	out.StartedAt, out.EndAt = &started, &end
	sess, err := s.m.Get(box.id)
	if err == nil {
		if at, ok := sess.Expires(); ok && box.pause {
			// The session's lifetime is its timeout: the session's own
			// word, whoever resumed it (its data plane, the v1 API).
			end = at.UTC()
		}
		l := sess.Limits()
		cpus, mem, disk := math.Max(l.CPUs, 0), int64(l.Memory)>>20, int64(l.Disk)>>20
		out.CPUCount, out.MemoryMB, out.DiskSizeMB = &cpus, &mem, &disk
	} else if errors.Is(err, errdefs.ErrPaused) {
		out.State = "paused"
	}
	return out
}

// base is what box's record says of it, running.
func (box *sandbox) base() sandboxJSON {
	out := sandboxJSON{TemplateID: box.template, SandboxID: wireID(box.id), ClientID: box.clientID, EnvdVersion: envdVersion, Metadata: box.metadata, State: "running",
		Lifecycle: &lifecycleJSON{OnTimeout: "kill", AutoResume: &box.autoResume}}
	if box.pause {
		out.Lifecycle.OnTimeout = "pause"
	}
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	return out
}

// find is the caller's live or paused sandbox id (in E2B's form), or
// E2B's 404 (421 when another server of the cluster holds it).
func (s *Server) find(ctx context.Context, id string) (*sandbox, error) {
	id = sessionID(id)
	box := s.box(id)
	if box != nil {
		who, _ := identity.From(ctx)
		if !who.Sees(box.owner.Tenant) {
			box = nil
		} else if _, err := s.m.Get(id); s.m.KeptAtShutdown(err) {
			return nil, errKept
		} else if err != nil && !errors.Is(err, errdefs.ErrPaused) {
			s.forget(id)
			box = nil
		}
	}
	if box == nil {
		return nil, s.unknown(id)
	}
	return box, nil
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	box, err := s.find(r.Context(), r.PathValue("id"))
	if err != nil {
		failControl(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, s.describe(box, true))
}

// list is the caller's sandboxes, filtered by metadata (E2B's query:
// metadata=url-encoded k=v pairs, each key and value encoded once more)
// and state (running, paused).
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		failControl(w, fmt.Errorf("%w: the query %q is not url-encoded", errdefs.ErrInvalidArgument, httpapi.Truncate(r.URL.RawQuery)))
		return
	}
	want, err := metadataFilter(q.Get("metadata"))
	if err != nil {
		failControl(w, err)
		return
	}
	states := q["state"]
	if len(states) == 1 {
		states = strings.Split(states[0], ",")
	}
	who, _ := identity.From(r.Context())
	s.mu.Lock()
	var boxes []*sandbox
	for _, b := range s.boxes {
		if who.Sees(b.owner.Tenant) && matches(b.metadata, want) {
			boxes = append(boxes, b)
		}
	}
	s.mu.Unlock()
	out := []sandboxJSON{}
	for _, b := range boxes {
		if _, err := s.m.Get(b.id); err != nil && !errors.Is(err, errdefs.ErrPaused) {
			// Left out as v1's listing leaves it out; one a shutdown
			// under way kept is listed paused after it (kept).
			if !s.m.KeptAtShutdown(err) {
				s.forget(b.id)
			}
			continue
		}
		if d := s.describe(b, false); len(states) == 0 || slices.Contains(states, d.State) {
			out = append(out, d)
		}
	}
	others, err := s.others(r.Context(), who)
	if err != nil {
		failControl(w, err)
		return
	}
	for _, d := range others {
		if matches(d.Metadata, want) && (len(states) == 0 || slices.Contains(states, d.State)) {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.Before(*out[j].StartedAt) })
	httpapi.WriteJSON(w, http.StatusOK, out)
}

func metadataFilter(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	pairs, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: metadata %q: want url-encoded key=value pairs", errdefs.ErrInvalidArgument, httpapi.Truncate(raw))
	}
	want := map[string]string{}
	for k, vs := range pairs {
		uk, err1 := url.QueryUnescape(k)
		uv, err2 := url.QueryUnescape(vs[0])
		if err1 != nil || err2 != nil {
			uk, uv = k, vs[0]
		}
		want[uk] = uv
	}
	return want, nil
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	id := sessionID(r.PathValue("id"))
	box, err := s.find(r.Context(), id)
	if err != nil {
		// E2B's JS SDK reads the body's code: 404 is "already gone".
		failControl(w, err)
		return
	}
	// Forgotten once its session is gone: a kill refused (a paused
	// sandbox being resumed) leaves the sandbox as it was.
	if err := s.m.DeleteFor(r.Context(), id); err != nil {
		if s.lost(err) {
			s.forget(box.id)
		}
		failControl(w, s.notFoundErr(id, err))
		return
	}
	s.forget(box.id)
	w.WriteHeader(http.StatusNoContent)
}

// timeoutRequest is set_timeout's and connect's body (seconds).
type timeoutRequest struct {
	Timeout *int64 `json:"timeout"`
	// Duration is the older refreshes' (seconds).
	Duration *int64 `json:"duration"`
	// Memory is pause's keepMemory (true: the memory, refused where the
	// session's pause cannot keep it; false: the files only) and
	// connect's (false, onResume "reboot": the files only, the memory
	// image unused).
	Memory *bool `json:"memory"`
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	s.retime(w, r, true, http.StatusNoContent)
}

func (s *Server) refresh(w http.ResponseWriter, r *http.Request) {
	s.retime(w, r, false, http.StatusNoContent)
}

// connect is E2B's connect (and resume): a paused sandbox resumed (its
// files, and its memory where a pause keeps it), the sandbox's tokens,
// its timeout extended to the one asked for.
func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	s.retime(w, r, false, http.StatusOK)
}

// pause is E2B's pause: the sandbox's session paused (persistence), 409
// when it is paused already (the SDK's false).
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
	if err := s.decode(w, r, &req); err != nil {
		failControl(w, err)
		return
	}
	if !s.cfg.Persistence.Enabled {
		failControl(w, fmt.Errorf("%w: this server cannot pause sandboxes (its operator has not set persistence.enabled); a sandbox ends at its timeout", errdefs.ErrUnsupported))
		return
	}
	box, err := s.find(r.Context(), r.PathValue("id"))
	if err != nil {
		failControl(w, err)
		return
	}
	if _, err := s.m.Get(box.id); errors.Is(err, errdefs.ErrPaused) {
		failControl(w, fmt.Errorf("%w: sandbox %q is paused already", errdefs.ErrConflict, box.id))
		return
	}
	// keepMemory: true is refused where the memory cannot be kept;
	// false pauses with the files only (E2B's filesystem-only snapshot),
	// which traffic never resumes (it would meet a restarted
	// interpreter): the pause itself says so, from the moment the
	// sandbox is paused, so no call can resume it in between; unset,
	// what the session's pauses keep (E2B's default is memory).
	ask := session.PauseAsk{}
	if req.Memory != nil {
		ask.Keep, ask.ExplicitResume = apitype.RestoreFiles, true
		if *req.Memory {
			ask.Keep, ask.ExplicitResume = apitype.RestoreMemory, false
		}
	}
	if _, err := s.m.PauseWith(r.Context(), box.id, ask); err != nil {
		failControl(w, s.notFoundErr(box.id, keepMemoryErr(err)))
		return
	}
	// A paused sandbox's timeout stops (persistence.keep bounds it);
	// one firing before this finds it paused (expire).
	box.mu.Lock()
	if box.timer != nil {
		box.timer.Stop()
	}
	box.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) retime(w http.ResponseWriter, r *http.Request, set bool, status int) {
	var req timeoutRequest
	if err := s.decode(w, r, &req); err != nil {
		failControl(w, err)
		return
	}
	box, err := s.find(r.Context(), r.PathValue("id"))
	if err != nil {
		failControl(w, err)
		return
	}
	if status == http.StatusOK {
		// connect and resume: a paused sandbox comes back.
		if _, err := s.m.Get(box.id); errors.Is(err, errdefs.ErrPaused) {
			keep := ""
			if req.Memory != nil && !*req.Memory {
				keep = apitype.RestoreFiles
			}
			if _, err := s.m.ResumeWith(r.Context(), box.id, keep); err != nil {
				failControl(w, s.notFoundErr(box.id, err))
				return
			}
			// Its timeout starts again (a pause stopped it).
			if err := s.deadline(box, min(defaultTTL, s.cfg.Server.MaxIdleTimeout.D()), true); err != nil {
				failControl(w, err)
				return
			}
		}
	} else if _, err := s.m.Get(box.id); errors.Is(err, errdefs.ErrPaused) {
		failControl(w, fmt.Errorf("%w: sandbox %q is paused: connect to it (Sandbox.connect) to resume it first", errdefs.ErrConflict, box.id))
		return
	}
	asked := req.Timeout
	if asked == nil {
		asked = req.Duration
	}
	if asked != nil || set {
		ttl, err := s.ttl(asked)
		if err != nil {
			failControl(w, err)
			return
		}
		if err := s.deadline(box, ttl, set); err != nil {
			failControl(w, err)
			return
		}
	}
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	httpapi.WriteJSON(w, status, s.describe(box, true))
}

// decode reads a JSON body under the server's cap. E2B's SDKs add fields
// from release to release: unknown ones are ignored, not refused.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := httpapi.ReadBody(w, r, int64(s.cfg.Server.MaxBodyBytes))
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: request body: %v", errdefs.ErrInvalidArgument, err)
	}
	return nil
}
