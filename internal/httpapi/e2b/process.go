package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"airlock/internal/apitype"
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

// commandLine is the shell command of an envd process: bash's -c script
// as it is, anything else quoted word by word.
func commandLine(c processConfig) string {
	switch c.Cmd {
	case "/bin/bash", "bash", "/bin/sh", "sh", "/usr/bin/bash":
		a := c.Args
		if len(a) > 0 && (a[0] == "-l" || a[0] == "--login") {
			a = a[1:]
		}
		if len(a) == 2 && a[0] == "-c" {
			return a[1]
		}
	}
	words := []string{quote(c.Cmd)}
	for _, a := range c.Args {
		words = append(words, quote(a))
	}
	return strings.Join(words, " ")
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// start is envd's Start: the command runs in the background (it outlives
// this stream, as an E2B process does), and is followed until it ends.
func (s *Server) start(w http.ResponseWriter, r *http.Request, sess *session.Session, box *sandbox, req processRequest) {
	var pc processConfig
	if err := unmarshal(req.Process, &pc); err != nil {
		failRPC(w, r, err)
		return
	}
	cr := apitype.CommandRequest{Command: commandLine(pc), Env: pc.Envs, Background: true}
	if req.Pty != nil {
		cr.PTY = &apitype.PTYSize{Cols: 80, Rows: 24}
		if req.Pty.Size != nil {
			cr.PTY = req.Pty.Size
		}
	}
	if pc.Cwd != nil && *pc.Cwd != "" {
		rel, _, err := wsPath(*pc.Cwd)
		if err != nil {
			failRPC(w, r, err)
			return
		}
		cr.Cwd = rel
	}
	res, err := sess.RunCommand(r.Context(), cr, nil)
	if err != nil {
		failRPC(w, r, err)
		return
	}
	if cr.PTY == nil && (req.Stdin == nil || !*req.Stdin) {
		sess.CommandStdin(res.ID, nil, true) // E2B's stdin:false: none to read
	}
	box.remember(res.ID, res.Pid, pc, req.Tag)
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
			code := 0
			if res.ExitCode != nil {
				code = *res.ExitCode
			}
			end := map[string]any{"exitCode": code, "exited": true, "status": "exit status " + strconv.Itoa(code)}
			if res.Signal != "" {
				end["exited"], end["status"] = false, "signal: "+res.Signal
			}
			if res.Killed {
				end["error"] = "killed: " + string(res.KillReason)
			}
			st.Send(frame(0, event("end", end)))
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

// proc is what a sandbox remembers of a process it started.
type proc struct {
	cid    string
	pid    int
	config processConfig
	tag    string
}

// maxProcs bounds what a sandbox remembers of its processes (the session
// forgets old commands too).
const maxProcs = 256

func (b *sandbox) remember(cid string, pid int, c processConfig, tag *string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := proc{cid: cid, pid: pid, config: c}
	if tag != nil {
		p.tag = *tag
	}
	if len(b.procs) >= maxProcs {
		b.procs = b.procs[1:]
	}
	b.procs = append(b.procs, p)
}

// find is the command a selector names: a process this sandbox started,
// or any command of the session by its pid.
func (b *sandbox) find(sess *session.Session, sel selector) (*apitype.CommandResult, error) {
	cid := ""
	b.mu.Lock()
	for _, p := range b.procs {
		if sel.Pid != nil && p.pid == *sel.Pid || sel.Tag != nil && p.tag == *sel.Tag {
			cid = p.cid
		}
	}
	b.mu.Unlock()
	for _, c := range sess.Commands() {
		if c.ID == cid || cid == "" && sel.Pid != nil && c.Pid == *sel.Pid {
			if c.State == apitype.CommandExited {
				break
			}
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

// processes is envd's List: the session's running commands.
func (b *sandbox) processes(sess *session.Session) []map[string]any {
	b.mu.Lock()
	byCID := map[string]proc{}
	for _, p := range b.procs {
		byCID[p.cid] = p
	}
	b.mu.Unlock()
	out := []map[string]any{}
	for _, c := range sess.Commands() {
		if c.State != apitype.CommandRunning {
			continue
		}
		p, ok := byCID[c.ID]
		if !ok {
			p.config = processConfig{Cmd: "/bin/bash", Args: []string{"-c", c.Command}}
		}
		info := map[string]any{"pid": c.Pid, "config": p.config}
		if p.tag != "" {
			info["tag"] = p.tag
		}
		out = append(out, info)
	}
	return out
}
