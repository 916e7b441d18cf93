package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
	"airlock/internal/session"
)

// processConfig is envd's ProcessConfig.
type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// selector is envd's ProcessSelector.
type selector struct {
	Pid *int    `json:"pid"`
	Tag *string `json:"tag"`
}

type processRequest struct {
	Process json.RawMessage `json:"process"`
	Pty     *struct {
		Size *apitype.PTYSize `json:"size"`
	} `json:"pty"`
	Tag   *string `json:"tag"`
	Stdin *bool   `json:"stdin"`
	Input *struct {
		Stdin string `json:"stdin"` // base64
		Pty   string `json:"pty"`
	} `json:"input"`
	Signal any `json:"signal"`
}

// process serves envd's process.Process service on the session's
// commands: a process is a background command, followed while a client
// streams it, and found again by its pid (or tag).
func (s *Server) process(w http.ResponseWriter, r *http.Request) {
	sess, box := sessionOf(r)
	var req processRequest
	if err := s.readRPC(w, r, &req); err != nil {
		failRPC(w, r, err)
		return
	}
	method := r.PathValue("method")
	if method == "Start" {
		s.start(w, r, sess, box, req)
		return
	}
	if method == "List" {
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{"processes": box.processes(sess)})
		return
	}
	var sel selector
	if err := unmarshal(req.Process, &sel); err != nil {
		failRPC(w, r, err)
		return
	}
	cmd, err := box.find(sess, sel)
	if err != nil {
		failRPC(w, r, err)
		return
	}
	switch method {
	case "Connect":
		st := httpapi.NewStream(w, "application/connect+json")
		defer st.Finish()
		st.Send(frame(0, event("start", map[string]int{"pid": cmd.Pid})))
		follow(r.Context(), st, sess, cmd.ID, false, cmd.PTY != nil)
		return
	case "SendInput":
		if req.Input == nil {
			failRPC(w, r, fmt.Errorf("%w: input.stdin or input.pty (base64) is missing", errdefs.ErrInvalidArgument))
			return
		}
		data, err := base64.StdEncoding.DecodeString(req.Input.Stdin + req.Input.Pty)
		if err != nil {
			failRPC(w, r, fmt.Errorf("%w: input.stdin is not base64", errdefs.ErrInvalidArgument))
			return
		}
		err = ended(cmd, sess.CommandStdin(cmd.ID, data, false))
		answerRPC(w, r, err)
	case "CloseStdin":
		answerRPC(w, r, ended(cmd, sess.CommandStdin(cmd.ID, nil, true)))
	case "SendSignal":
		sig := strings.TrimPrefix(fmt.Sprint(req.Signal), "SIGNAL_")
		if f, ok := req.Signal.(float64); ok {
			sig = strconv.Itoa(int(f))
		}
		answerRPC(w, r, ended(cmd, sess.SignalCommand(cmd.ID, sig)))
	case "Update":
		if req.Pty == nil || req.Pty.Size == nil {
			failRPC(w, r, fmt.Errorf("%w: pty.size is what a process's update changes", errdefs.ErrInvalidArgument))
			return
		}
		answerRPC(w, r, ended(cmd, sess.ResizeCommand(cmd.ID, *req.Pty.Size)))
	default:
		failRPC(w, r, fmt.Errorf("%w: process.Process/%s", errdefs.ErrUnsupported, httpapi.Truncate(method)))
	}
}

func answerRPC(w http.ResponseWriter, r *http.Request, err error) {
	if err != nil {
		failRPC(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, struct{}{})
}

// ended is err of a command that has ended as E2B says it: no such
// process.
func ended(cmd *apitype.CommandResult, err error) error {
	if err != nil && errors.Is(err, errdefs.ErrConflict) {
		return fmt.Errorf("%w: process %d has ended", errdefs.ErrNotFound, cmd.Pid)
	}
	return err
}

func unmarshal(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return fmt.Errorf("%w: process is missing", errdefs.ErrInvalidArgument)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%w: process: %v", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

func event(kind string, v any) map[string]any {
	return map[string]any{"event": map[string]any{kind: v}}
}

// processArgv is what an envd process runs: its cmd and args as they
// are, but a shell started as a login shell (E2B's `bash -l -c`) is not
// one here: a login shell's /etc/profile would replace the session's
// PATH (its packages, its tools) with the distribution's.
func processArgv(c processConfig) []string {
	args := c.Args
	if base := path.Base(c.Cmd); base == "bash" || base == "sh" {
		args = slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "-l" || a == "--login" })
	}
	return append([]string{c.Cmd}, args...)
}

// processCwd is an envd process's working directory as the session names
// it: under /home/user (or /workspace), relative to the session's
// /workspace; elsewhere, the absolute path (the sandbox's business).
func processCwd(p string) string {
	if rel, _, err := wsPath(p); err == nil {
		return rel
	}
	return p
}

// processUser checks the user a request runs as (HTTP Basic, as E2B's
// SDKs send it): every command runs as the sandbox's one user.
func processUser(r *http.Request) error {
	u, _, ok := r.BasicAuth()
	if !ok || u == "" || u == "user" {
		return nil
	}
	return fmt.Errorf("%w: user %q: an airlock sandbox runs every command as its one user, \"user\" (uid 1000); there is no root or other user to run as", errdefs.ErrInvalidArgument, httpapi.Truncate(u))
}

// connectTimeout is a stream's Connect-Timeout-Ms, which envd makes the
// process's own timeout (0: none). airlock enforces it (the session
// kills the command's process group at it), within the server's
// maximum.
func connectTimeout(r *http.Request) (config.Duration, error) {
	v := r.Header.Get("Connect-Timeout-Ms")
	if v == "" {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 || len(v) > 10 {
		return 0, fmt.Errorf("%w: Connect-Timeout-Ms %q is not a number of milliseconds", errdefs.ErrInvalidArgument, httpapi.Truncate(v))
	}
	return config.Duration(time.Duration(ms) * time.Millisecond), nil
}

// start is envd's Start: the command runs in the background (it outlives
// this stream, as an E2B process does), and is followed until it ends.
func (s *Server) start(w http.ResponseWriter, r *http.Request, sess *session.Session, box *sandbox, req processRequest) {
	var pc processConfig
	if err := unmarshal(req.Process, &pc); err != nil {
		failRPC(w, r, err)
		return
	}
	if err := processUser(r); err != nil {
		failRPC(w, r, err)
		return
	}
	timeout, err := connectTimeout(r)
	if err != nil {
		failRPC(w, r, err)
		return
	}
	if pc.Cmd == "" {
		failRPC(w, r, fmt.Errorf("%w: process.cmd is empty", errdefs.ErrInvalidArgument))
		return
	}
	cr := apitype.CommandRequest{Argv: processArgv(pc), Env: pc.Envs, Background: true, Timeout: timeout}
	if req.Tag != nil {
		cr.Tag = *req.Tag
	}
	if req.Pty != nil {
		cr.PTY = &apitype.PTYSize{Cols: 80, Rows: 24}
		if req.Pty.Size != nil {
			cr.PTY = req.Pty.Size
		}
	}
	if pc.Cwd != nil && *pc.Cwd != "" {
		cr.Cwd = processCwd(*pc.Cwd)
	}
	res, err := sess.RunCommand(r.Context(), cr, nil)
	if err != nil {
		failRPC(w, r, err)
		return
	}
	if cr.PTY == nil && req.Stdin != nil && !*req.Stdin {
		sess.CommandStdin(res.ID, nil, true) // E2B's stdin:false: none to read
	}
	box.remember(res.ID, pc)
	st := httpapi.NewStream(w, "application/connect+json")
	defer st.Finish()
	st.Send(frame(0, event("start", map[string]int{"pid": res.Pid})))
	follow(r.Context(), st, sess, res.ID, true, cr.PTY != nil)
}

// follow streams command cid's output (with replay, what it printed
// already first) until it ends (then its end and the stream's), the
// client leaves, or the session ends. A terminal's output is envd's pty
// data.
func follow(ctx context.Context, st *httpapi.Stream, sess *session.Session, cid string, replay, pty bool) {
	quiet := make(chan struct{}, 1)
	done := make(chan struct{})
	defer close(done)
	go func() { // keepalives while the command is quiet
		t := time.NewTicker(keepalive)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-quiet:
				t.Reset(keepalive)
			case <-t.C:
				st.Send(frame(0, event("keepalive", struct{}{})))
			}
		}
	}()
	ended := false
	err := sess.AttachCommand(ctx, cid, replay, func(ev apitype.Event) {
		select {
		case quiet <- struct{}{}:
		default:
		}
		switch ev.Type {
		case apitype.EventStdout, apitype.EventStderr:
			name := ev.Type
			if pty {
				name = "pty"
			}
			if ev.Text != "" {
				st.Send(frame(0, event("data", map[string]string{name: base64.StdEncoding.EncodeToString([]byte(ev.Text))})))
			}
		case apitype.EventEnd:
			if ev.Command == nil {
				return
			}
			res := ev.Command
			st.Send(frame(0, event("end", endEvent(res))))
			st.Send(endFrame(nil))
			ended = true
		}
	})
	if ended || ctx.Err() != nil {
		return
	}
	ce := connectError{Code: "unavailable", Message: "the process's output could not be followed"}
	if err != nil {
		if code, ok := connectCodes[errdefs.KindOf(err).HTTPStatus]; ok {
			ce = connectError{Code: code, Message: errdefs.Message(err)}
		}
	}
	st.Send(endFrame(&ce))
}

// endEvent is envd's EndEvent of a command that ended: as Go's
// os.ProcessState says it (a signal's end is exit code -1, not exited),
// and why airlock killed it, if it did, in its error.
func endEvent(res *apitype.CommandResult) map[string]any {
	code := 0
	if res.ExitCode != nil {
		code = *res.ExitCode
	}
	status := "exit status " + strconv.Itoa(code)
	end := map[string]any{"exitCode": code, "exited": true, "status": status}
	if res.Signal != "" {
		if sig := unix.SignalNum(res.Signal); sig != 0 {
			status = "signal: " + sig.String()
		} else {
			status = "signal: " + res.Signal
		}
		end["exitCode"], end["exited"], end["status"] = -1, false, status
	}
	if code != 0 || res.Signal != "" {
		end["error"] = status
	}
	if res.Killed && res.KillReason != "" {
		end["error"] = status + " (airlock killed it: " + killWhy(res.KillReason) + ")"
	}
	return end
}

// killWhy says why airlock killed a command, in E2B's words.
func killWhy(r apitype.KillReason) string {
	switch r {
	case apitype.KillTimeout:
		return "it ran past its timeoutMs"
	case apitype.KillShutdown:
		return "the sandbox was paused for the server's shutdown"
	case apitype.KillLifetime:
		return "the sandbox was paused at the end of its timeout"
	}
	return string(r)
}

// proc is what a sandbox remembers of a process it started: its config
// as the client gave it (envd lists that).
type proc struct {
	cid    string
	config processConfig
}

// maxProcs bounds what a sandbox remembers of its processes (the session
// forgets old commands too).
const maxProcs = 256

func (b *sandbox) remember(cid string, c processConfig) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.procs) >= maxProcs {
		b.procs = b.procs[1:]
	}
	b.procs = append(b.procs, proc{cid: cid, config: c})
}

// find is the running command a selector names, by its pid or its tag.
func (b *sandbox) find(sess *session.Session, sel selector) (*apitype.CommandResult, error) {
	for _, c := range sess.Commands() {
		if c.State == apitype.CommandRunning && (sel.Pid != nil && c.Pid == *sel.Pid || sel.Pid == nil && sel.Tag != nil && c.Tag == *sel.Tag) {
			return &c, nil
		}
	}
	return nil, fmt.Errorf("%w: no running process %s", errdefs.ErrNotFound, describe(sel))
}

func describe(sel selector) string {
	if sel.Pid != nil {
		return "with pid " + strconv.Itoa(*sel.Pid)
	}
	if sel.Tag != nil {
		return "tagged " + strconv.Quote(httpapi.Truncate(*sel.Tag))
	}
	return "(no pid or tag given)"
}

// processes is envd's List: the session's running commands, each with
// its config (as its client gave it, for those started here) and tag.
func (b *sandbox) processes(sess *session.Session) []map[string]any {
	b.mu.Lock()
	byCID := map[string]processConfig{}
	for _, p := range b.procs {
		byCID[p.cid] = p.config
	}
	b.mu.Unlock()
	out := []map[string]any{}
	for _, c := range sess.Commands() {
		if c.State != apitype.CommandRunning {
			continue
		}
		config, ok := byCID[c.ID]
		if !ok {
			config = processConfig{Cmd: "/bin/bash", Args: []string{"-c", c.Command}}
			if len(c.Argv) > 0 {
				config = processConfig{Cmd: c.Argv[0], Args: c.Argv[1:]}
			}
		}
		if config.Args == nil {
			config.Args = []string{}
		}
		info := map[string]any{"pid": c.Pid, "config": config}
		if c.Tag != "" {
			info["tag"] = c.Tag
		}
		out = append(out, info)
	}
	return out
}
