package session

import (
	"encoding/json"
	"fmt"

	"airlock/internal/apitype"
	"airlock/internal/broker"
	"airlock/internal/egress"
	"airlock/internal/errdefs"
)

// maxToolCalls bounds the calls an execution's result lists; the rest
// are counted (ToolCallsDropped) and in the audit log only.
const maxToolCalls = 256

// SetBroker makes the operator's tools available to sessions (nil: the
// server declares none); call it before the manager serves anything.
func (m *Manager) SetBroker(b *broker.Broker) { m.broker = b }

// Broker is the manager's tool broker (nil: no tools).
func (m *Manager) Broker() *broker.Broker { return m.broker }

// ToolCallEvent is a call sandbox code made to one of its session's
// tools, decided and recorded by the broker.
type ToolCallEvent struct {
	Caller
	Session string
	// Execution is the execution it happened in ("": none ran).
	Execution string
	Call      apitype.ToolCall
}

// resolveTools checks a request's tools against its tenant's.
func (m *Manager) resolveTools(tenant string, asked []string) ([]string, error) {
	if len(asked) == 0 {
		return nil, nil
	}
	if m.broker == nil {
		return nil, fmt.Errorf("%w: tools: this server declares no tools (its operator declares them under \"tools\" in the configuration)", errdefs.ErrInvalidArgument)
	}
	return m.broker.Resolve(tenant, asked)
}

// toolsEnv adds what the in-sandbox clients need to env: where the
// session's tools answer, and the clients on the paths.
func toolsEnv(env map[string]string) map[string]string {
	env[broker.URLEnv] = "http://" + broker.Addr
	path := env["PATH"]
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	env["PATH"] = path + ":" + broker.BinDir
	// Sessions' interpreters have the clients' directory on sys.path;
	// programs and the Python processes code starts find it here.
	if pp := env["PYTHONPATH"]; pp != "" {
		env["PYTHONPATH"] = pp + ":" + broker.PythonDir
	} else {
		env["PYTHONPATH"] = broker.PythonDir
	}
	if np := env["NODE_PATH"]; np != "" {
		env["NODE_PATH"] = np + ":" + broker.NodeDir
	} else {
		env["NODE_PATH"] = broker.NodeDir
	}
	return env
}

// attachTools opens the session's tool endpoint inside its sandbox's
// network namespace (see broker.Addr) and serves its calls there. Under
// attachMu, as a gate is attached: the namespace is entered through a
// descriptor number a teardown could close and reuse.
func (s *Session) attachTools(tenant string, names []string) error {
	s.attachMu.Lock()
	defer s.attachMu.Unlock()
	if end := s.End(); !end.Zero() {
		return gone(end)
	}
	ns, ok := s.inst.NetNS()
	if !ok {
		return fmt.Errorf("%w: this %s sandbox has no network namespace for its tools' endpoint", errdefs.ErrUnavailable, s.inst.Isolation())
	}
	red, err := s.toolRedaction(tenant)
	if err != nil {
		return err
	}
	ln, err := egress.ListenAt(ns, broker.Addr)
	if err != nil {
		return errdefs.Private(errdefs.ErrUnavailable, "could not open the session's tool endpoint in its sandbox", err)
	}
	bs := s.m.broker.NewSession(broker.SessionOptions{ID: s.id, Tenant: tenant, Tools: names, Report: s.toolCalled, Redact: red})
	bs.Serve(ln, s.m.log)
	s.mu.Lock()
	s.tools = bs
	s.mu.Unlock()
	return nil
}

// toolRedaction redacts a tool call's arguments as the record of the
// call (result, stream, audit) shows them: with the session's output
// policy for tenant (see redactor).
func (s *Session) toolRedaction(tenant string) (func(json.RawMessage) json.RawMessage, error) {
	red, err := s.redactor(tenant)
	if err != nil {
		return nil, err
	}
	return func(doc json.RawMessage) json.RawMessage {
		if red == nil {
			return doc
		}
		out, _ := red.JSON(doc)
		return out
	}, nil
}

func (s *Session) toolSession() *broker.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tools
}

// closeTools stops the session's tool endpoint and its calls in flight.
func (s *Session) closeTools() {
	if bs := s.toolSession(); bs != nil {
		bs.Close()
	}
}

// Tools describes the tools the session's code may call.
func (s *Session) Tools() []apitype.ToolInfo {
	if bs := s.toolSession(); bs != nil {
		return bs.Tools()
	}
	return []apitype.ToolInfo{}
}

// toolCalled records a call: in the running execution's result and
// stream, and with the observers (audit, metrics). The endpoint is the
// session's, shared by its contexts: a call goes to the execution
// running in the context its client names (AIRLOCK_CONTEXT; none if
// that context runs nothing), else to the only one running; while
// several run and it names none, it is in the audit log only.
func (s *Session) toolCalled(c apitype.ToolCall) {
	s.mu.Lock()
	var ex *execution
	if cc := s.ctxs[c.Context]; cc != nil {
		if cc.cur != nil && cc.cur.id != "" {
			ex = cc.cur // else the context runs nothing: audit log only
		}
	} else {
		c.Context = "" // none, or not a context of the session's
		ex = s.soleExecutionLocked()
	}
	owner := s.owner
	s.mu.Unlock()
	var execID string
	if ex != nil {
		execID = ex.id
		ex.toolCall(c)
	}
	if s.m.obs != nil {
		s.m.obs.ToolCalled(ToolCallEvent{Caller: Caller{Tenant: owner.Tenant}, Session: s.id, Execution: execID, Call: c})
	}
}

// toolCall adds a call to the execution's result and streams it.
func (ex *execution) toolCall(c apitype.ToolCall) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.toolsDone {
		return // the result is out: the audit log has it
	}
	if len(ex.toolCalls) >= maxToolCalls {
		ex.toolCallsDropped++
		return
	}
	ex.toolCalls = append(ex.toolCalls, c)
	if ex.emit != nil {
		ex.stdout.flush()
		ex.stderr.flush()
		ex.emit(apitype.Event{Type: apitype.EventToolCall, ToolCall: &c})
	}
}

// soleExecutionLocked is the execution running in the session when
// exactly one is (nil otherwise); s.mu is held.
func (s *Session) soleExecutionLocked() *execution {
	var one *execution
	for _, c := range s.ctxs {
		if ex := c.cur; ex != nil && ex.id != "" {
			if one != nil {
				return nil
			}
			one = ex
		}
	}
	return one
}
