package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/identity"
	"airlock/internal/workspace"
)

// Caps on files the tools move (results.go has the caps on results).
const (
	readDefault   = 1 << 20 // read_file's default max_bytes
	readMax       = 8 << 20 // and its cap
	writeMax      = 3 << 20 // write_file's content (MCP bodies are 4 MiB)
	progressEvery = 200 * time.Millisecond
)

// ExecuteIn is execute_code's input.
type ExecuteIn struct {
	Code      string  `json:"code" jsonschema:"the code to run; state persists across calls in the same session"`
	Language  string  `json:"language,omitempty" jsonschema:"python (default), bash or javascript"`
	SessionID string  `json:"session_id,omitempty" jsonschema:"a session from create_session; without it, this connection's default session. Every language of a session shares its files: python writes a file, bash and javascript read it"`
	TimeoutS  float64 `json:"timeout_s,omitempty" jsonschema:"wall-clock limit in seconds (default: the session's, 30 s unless configured; at most the server's maximum, 15 min unless configured)"`
}

// ErrorOut is an exception.
type ErrorOut struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback"`
}

// FileOut is a file an execution created, modified or deleted.
type FileOut struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Change string `json:"change"`
	URI    string `json:"uri,omitempty"`
}

// ExecuteOut is execute_code's structured result. Its text fields are
// capped as the text summary is (8 KiB each, results.go).
type ExecuteOut struct {
	SessionID      string           `json:"session_id"`
	Stdout         string           `json:"stdout" jsonschema:"at most 8 KiB: its start and end, around a line saying how much was left out"`
	Stderr         string           `json:"stderr" jsonschema:"at most 8 KiB, as stdout"`
	StdoutDropped  int              `json:"stdout_dropped,omitempty" jsonschema:"bytes of stdout left out by the 8 KiB cap"`
	StderrDropped  int              `json:"stderr_dropped,omitempty" jsonschema:"bytes of stderr left out by the 8 KiB cap"`
	Result         string           `json:"result,omitempty"`
	Results        []map[string]any `json:"results" jsonschema:"display outputs (at most 16): text capped at 8 KiB; images and other binary data replaced by a line saying what became of them"`
	ResultsDropped int              `json:"results_dropped,omitempty" jsonschema:"display outputs left out of results"`
	ImagesDropped  int              `json:"images_dropped,omitempty" jsonschema:"images not attached (at most 8 per result)"`
	Error          *ErrorOut        `json:"error,omitempty"`
	ExitCode       int              `json:"exit_code" jsonschema:"the execution's status: a bash block's exit status, 1 after an exception, 137 when killed; not 0 is an error"`
	Files          []FileOut        `json:"files" jsonschema:"files the code created, modified or deleted in /workspace (at most 50)"`
	FilesDropped   int              `json:"files_dropped,omitempty" jsonschema:"changed files left out of files"`
	Truncated      bool             `json:"truncated" jsonschema:"something was left out: by the caps above, or by the session's max_output"`
	DurationMs     float64          `json:"duration_ms"`
	KillReason     string           `json:"kill_reason,omitempty"`
	ExecutionCount int              `json:"execution_count"`
	SessionEnded   bool             `json:"session_ended,omitempty"`
	EndReason      string           `json:"end_reason,omitempty"`
	Note           string           `json:"note,omitempty"`
	ToolCalls      []ToolCallOut    `json:"tool_calls,omitempty" jsonschema:"calls the code made to the session's tools (at most 16), with airlock's decision"`
	// ToolCallsDropped counts calls left out of ToolCalls.
	ToolCallsDropped int `json:"tool_calls_dropped,omitempty"`
}

// maxToolCalls bounds the tool calls an execution's result lists.
const maxToolCalls = 16

// ToolCallOut is a call of one of the session's tools, as an execution
// made it.
type ToolCallOut struct {
	Tool     string `json:"tool"`
	Decision string `json:"decision" jsonschema:"ok, refused (before the call was made) or failed (a timeout, an answer over its cap)"`
	Code     string `json:"code,omitempty"`
	Reason   string `json:"reason,omitempty" jsonschema:"why it was refused or failed, at most 300 bytes"`
	Field    string `json:"field,omitempty" jsonschema:"the argument at fault"`
	Rule     string `json:"rule,omitempty" jsonschema:"the rule it broke"`
	Status   *int   `json:"status,omitempty" jsonschema:"the tool's HTTP status or exit status"`
}

// CommandIn is run_command's input.
type CommandIn struct {
	Command   string  `json:"command" jsonschema:"a shell command, run with bash -c in the session's sandbox"`
	SessionID string  `json:"session_id,omitempty" jsonschema:"a session from create_session; without it, this connection's default python session"`
	TimeoutS  float64 `json:"timeout_s,omitempty" jsonschema:"wall-clock limit in seconds (default: the session's)"`
	Cwd       string  `json:"cwd,omitempty" jsonschema:"absolute directory to run in; /workspace by default"`
}

// CommandOut is run_command's structured result.
type CommandOut struct {
	SessionID     string  `json:"session_id"`
	ExitCode      int     `json:"exit_code"`
	Stdout        string  `json:"stdout" jsonschema:"at most 8 KiB: its start and end, around a line saying how much was left out"`
	Stderr        string  `json:"stderr" jsonschema:"at most 8 KiB, as stdout"`
	StdoutDropped int     `json:"stdout_dropped,omitempty" jsonschema:"bytes of stdout left out by the 8 KiB cap"`
	StderrDropped int     `json:"stderr_dropped,omitempty" jsonschema:"bytes of stderr left out by the 8 KiB cap"`
	Truncated     bool    `json:"truncated" jsonschema:"something was left out: by the 8 KiB caps, or by the session's max_output"`
	DurationMs    float64 `json:"duration_ms"`
	Killed        bool    `json:"killed"`
	KillReason    string  `json:"kill_reason,omitempty"`
	Note          string  `json:"note,omitempty"`
}

// WriteIn is write_file's input.
type WriteIn struct {
	Path      string `json:"path" jsonschema:"path under /workspace (relative, or absolute under /workspace)"`
	Content   string `json:"content" jsonschema:"the file's content: text, or base64 with encoding=base64; at most 3 MiB (use the HTTP files API for larger files)"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"utf8 (default) or base64"`
	SessionID string `json:"session_id,omitempty" jsonschema:"a session from create_session; without it, this connection's default python session"`
}

// WriteOut is write_file's structured result.
type WriteOut struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	URI       string `json:"uri"`
}

// ReadIn is read_file's input.
type ReadIn struct {
	Path      string `json:"path" jsonschema:"path under /workspace"`
	MaxBytes  int64  `json:"max_bytes,omitempty" jsonschema:"read at most this many bytes (default 1 MiB, at most 8 MiB; the HTTP files API has no such cap)"`
	SessionID string `json:"session_id,omitempty" jsonschema:"a session from create_session; without it, this connection's default python session"`
}

// ToolsIn is list_tools' input.
type ToolsIn struct {
	SessionID string `json:"session_id,omitempty" jsonschema:"a session from create_session; without it, the tools a new session may be given"`
}

// ToolsOut is list_tools' structured result.
type ToolsOut struct {
	SessionID string    `json:"session_id,omitempty"`
	Tools     []ToolOut `json:"tools"`
}

// ToolOut is a tool sandboxed code may call.
type ToolOut struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Kind        string `json:"kind" jsonschema:"http or command"`
	Writable    bool   `json:"writable" jsonschema:"the tool may change things; tools are read-only unless declared so"`
	Arguments   any    `json:"arguments" jsonschema:"the JSON Schema its arguments must pass"`
}

// ListIn is list_files' input.
type ListIn struct {
	Path      string `json:"path,omitempty" jsonschema:"directory under /workspace (default: /workspace itself)"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"list the whole tree"`
	SessionID string `json:"session_id,omitempty" jsonschema:"a session from create_session; without it, this connection's default python session"`
}

// EntryOut is one listed file.
type EntryOut struct {
	Path string `json:"path"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

// ListOut is list_files' structured result.
type ListOut struct {
	SessionID      string     `json:"session_id"`
	Path           string     `json:"path"`
	Entries        []EntryOut `json:"entries" jsonschema:"at most 500"`
	EntriesDropped int        `json:"entries_dropped,omitempty" jsonschema:"entries left out of entries"`
	Truncated      bool       `json:"truncated"`
}

// CreateIn is create_session's input.
type CreateIn struct {
	Language    string            `json:"language,omitempty" jsonschema:"python (default), bash or javascript"`
	Limits      map[string]any    `json:"limits,omitempty" jsonschema:"limits such as {\"memory\": \"1G\", \"timeout\": \"2m\", \"cpus\": 2}; each at most the server's maximum"`
	Env         map[string]string `json:"env,omitempty" jsonschema:"environment variables of the session"`
	IdleTimeout string            `json:"timeout_idle,omitempty" jsonschema:"end the session after this long unused (e.g. 30m)"`
	Network     *NetworkIn        `json:"network,omitempty" jsonschema:"the hosts the session may reach; without it the session has no network"`
	Template    string            `json:"template,omitempty" jsonschema:"the template (root filesystem with its packages) the session runs on, as the operator registered it (e.g. code-interpreter); default: the server's"`
	Tools       []string          `json:"tools,omitempty" jsonschema:"tools the session's code may call through airlock, by name (list_tools lists those you may use); airlock holds their credentials"`
	Secrets     []string          `json:"secrets,omitempty" jsonschema:"secrets (API keys) the session's code may use, by name (list_secrets lists those you may use): each is in its environment variable only as a placeholder, which airlock replaces with the value in requests to the secret's hosts only; network must allow those hosts"`
}

// NetworkIn is a session's egress policy, as the HTTP API takes it.
type NetworkIn struct {
	Allow []string `json:"allow" jsonschema:"names (pypi.org), wildcards (*.example.com), each with an optional :port; within the server's network policy, which refuses anything beyond it"`
}

// SessionOut describes a session.
type SessionOut struct {
	SessionID   string         `json:"session_id"`
	Language    string         `json:"language"`
	State       string         `json:"state"`
	Limits      map[string]any `json:"limits"`
	IdleTimeout string         `json:"timeout_idle"`
	Network     []string       `json:"network,omitempty" jsonschema:"the hosts the session may reach (absent: no network)"`
	Template    string         `json:"template,omitempty" jsonschema:"the template the session runs on (absent: the server's own root)"`
	Tools       []string       `json:"tools,omitempty" jsonschema:"the tools the session's code may call"`
	Secrets     []SecretOut    `json:"secrets,omitempty" jsonschema:"the secrets the session's code may use, as placeholders"`
}

// SecretOut is a secret a session may use: where its placeholder is and
// the hosts its value goes to, never the value.
type SecretOut struct {
	Name   string   `json:"name"`
	EnvVar string   `json:"env_var" jsonschema:"the environment variable holding the placeholder"`
	Hosts  []string `json:"hosts" jsonschema:"the hosts the value is sent to in place of the placeholder"`
}

// SecretsOut is list_secrets' structured result.
type SecretsOut struct {
	Secrets []SecretOut `json:"secrets"`
}

// CloseIn is close_session's input.
type CloseIn struct {
	SessionID string `json:"session_id" jsonschema:"the session to end"`
}

// CloseOut is close_session's result.
type CloseOut struct {
	SessionID string `json:"session_id"`
	Closed    bool   `json:"closed"`
}

// anys is vs as a schema's enum (nil: none).
func anys(vs []string) []any {
	if len(vs) == 0 {
		return nil
	}
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

// withEnum is the inferred input schema of T with property's enum set.
func withEnum[T any](property string, values []any) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(err)
	}
	if p := s.Properties[property]; p != nil {
		p.Enum = values
	}
	return s
}

func (s *Server) addTools() {
	yes, no := true, false
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "execute_code",
		Title: "Run code",
		Description: "Runs Python (default), bash or JavaScript in an isolated sandbox and returns what a notebook would show: " +
			"stdout, stderr, the value of the last expression, what it displayed (plots: as images when this connection takes " +
			"them), the exception with its traceback, and the files the code created or changed in /workspace (by path: read_file " +
			"reads them). State persists: variables, imports and files stay " +
			"for the next call in the same session (this connection's default session unless session_id is given). " +
			"numpy, pandas, matplotlib and scikit-learn are available; there is no network (see create_session). The result carries at most 8 KiB of " +
			"stdout, of stderr, of the result and of the traceback (their start and end; it says how much was left out): write long " +
			"output to a file and read parts of it. Long runs send progress notifications with their output.",
		InputSchema: withEnum[ExecuteIn]("language", anys(s.o.Languages)),
		Annotations: &mcp.ToolAnnotations{Title: "Run code", DestructiveHint: &no, OpenWorldHint: &no},
	}, s.executeCode)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "run_command",
		Title: "Run a shell command",
		Description: "Runs a shell command (bash -c) in the same sandbox as a session's code — same files, same limits — without " +
			"touching the interpreter's state; returns its exit code, stdout and stderr.",
		Annotations: &mcp.ToolAnnotations{Title: "Run a shell command", DestructiveHint: &no, OpenWorldHint: &no},
	}, s.runCommand)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:        "write_file",
		Title:       "Write a file",
		Description: "Writes a file into a session's /workspace (text, or base64 for binary). At most 3 MiB; larger files go through the HTTP files API (PUT /v1/sessions/{id}/files/{path}).",
		InputSchema: withEnum[WriteIn]("encoding", []any{"utf8", "base64"}),
		Annotations: &mcp.ToolAnnotations{Title: "Write a file", DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, s.writeFile)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:        "read_file",
		Title:       "Read a file",
		Description: "Reads a file from a session's /workspace: text as text; an image as an image and any other binary file as an embedded blob when this connection takes them, else a line that says what the file is. At most max_bytes (1 MiB by default, 8 MiB at most); larger files go through the HTTP files API.",
		Annotations: &mcp.ToolAnnotations{Title: "Read a file", ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.readFile)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:        "list_files",
		Title:       "List files",
		Description: "Lists a directory of a session's /workspace (the whole tree with recursive).",
		Annotations: &mcp.ToolAnnotations{Title: "List files", ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.listFiles)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "create_session",
		Title: "Create a session",
		Description: "Starts a new sandboxed session (python, bash or javascript) with optional limits, environment, network " +
			"(the hosts it may reach, within the server's policy; sessions have no network otherwise), template (the root " +
			"filesystem with its packages, as the operator registered it, e.g. code-interpreter), tools (list_tools) and " +
			"secrets (list_secrets: API keys its code uses through placeholders, never seeing them), and returns its " +
			"session_id for the other tools. Not needed for a single conversation: every tool has a default session. It ends with this connection, like the default sessions; " +
			"a restart of the server pauses it instead (the default sessions end), and naming its session_id from a new connection resumes it.",
		InputSchema: withEnum[CreateIn]("language", anys(s.o.Languages)),
		Annotations: &mcp.ToolAnnotations{Title: "Create a session", DestructiveHint: &no, OpenWorldHint: &no},
	}, s.createSession)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "list_tools",
		Title: "List the tools sandboxed code may call",
		Description: "Lists the tools code in a session may call through airlock (an API, a database, a company service), with the JSON " +
			"Schema of their arguments. airlock attaches their credentials; the sandbox never sees them. With session_id: that " +
			"session's tools; without: those create_session may give a session (\"tools\": [names]). In Python code: " +
			"from airlock_tools import call; call(\"name\", arg=value); in bash: airlock-tool name arg=value.",
		Annotations: &mcp.ToolAnnotations{Title: "List tools", ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.listTools)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "list_secrets",
		Title: "List the secrets sandboxed code may use",
		Description: "Lists the secrets (API keys) create_session may give a session (\"secrets\": [names]): the environment variable " +
			"its placeholder is in and the hosts its value goes to, never the value. Code uses the variable as the key " +
			"(e.g. the OpenAI SDK reads OPENAI_API_KEY); airlock replaces the placeholder with the value only in requests " +
			"to those hosts, which the session's network must allow.",
		Annotations: &mcp.ToolAnnotations{Title: "List secrets", ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.listSecrets)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:        "close_session",
		Title:       "Close a session",
		Description: "Ends a session and frees its sandbox; its state and files are gone.",
		Annotations: &mcp.ToolAnnotations{Title: "Close a session", DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, s.closeSession)
	s.addPortTools()
}

// failed is a tool result that reports err to the model.
func failed(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "error: " + shown(err)}}}
}

// shown is what a model (or an MCP client) reads of err: the API's own
// message, or the message of an argument a tool refused. Everything else
// (a transport's failure, a malformed answer) names requests this server
// made, with their URLs, socket paths or addresses: it is said in words,
// never quoted. Tool errors of the tools themselves wrap an errdefs
// sentinel, so that errdefs.Message shows them.
func shown(err error) string {
	var e *client.Error
	switch {
	case errors.As(err, &e):
		if e.Code == "" {
			// Not the API's error body: a proxy's page, perhaps.
			return fmt.Sprintf("the airlock server answered %d %s", e.Status, http.StatusText(e.Status))
		}
		msg := e.Message
		if e.RequestID != "" {
			msg += " (request " + e.RequestID + ")"
		}
		return msg
	case errors.Is(err, client.ErrUnreachable):
		return "the airlock server cannot be reached; try again once it runs"
	case errors.Is(err, context.Canceled):
		return "the call was cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "the call ran out of time"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return "the airlock server did not answer (the connection to it failed); try again"
	}
	return errdefs.Message(err)
}

// argError is a tool's refusal of an argument.
func argError(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errdefs.ErrInvalidArgument}, a...)...)
}

// workspacePath is a file path argument as the HTTP files API reads it:
// relative to /workspace, or absolute under it. file says the path must
// name something in the workspace, not /workspace itself.
func workspacePath(p string, file bool) (string, error) {
	clean, err := workspace.Clean(p)
	if err != nil {
		return "", err
	}
	if file && clean == "" {
		return "", argError("path %q is /workspace itself; name a file in it", p)
	}
	return clean, nil
}

// sessionArg checks a session_id argument: one the API can be asked
// about (a path segment of its URLs).
func sessionArg(id string) error {
	if id == "." || id == ".." || strings.ContainsAny(id, "/") {
		return fmt.Errorf("%w: no session %q: pass a session_id that create_session returned, or none for this connection's default session", errdefs.ErrNotFound, id)
	}
	return nil
}

func asClientError(err error, target **client.Error) bool { return errors.As(err, target) }

// timeout turns timeout_s into a request's timeout.
func timeout(seconds float64) (config.Duration, error) {
	if seconds < 0 || seconds > 24*3600 {
		return 0, argError("timeout_s must be between 0 and 86400")
	}
	return config.Duration(time.Duration(seconds * float64(time.Second))), nil
}

// tail keeps the last n bytes of s (on a rune boundary), saying so.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return "[... " + fmt.Sprint(cut) + " bytes before this are left out]\n" + s[cut:]
}

// fileURI is the resource URI of a session's file.
func fileURI(session, p string) string {
	return "airlock://sessions/" + session + "/files/" + p
}

// progress sends what an execution prints as progress notifications, at
// most every progressEvery, when the client asked for progress.
type progress struct {
	ctx   context.Context
	req   *mcp.CallToolRequest
	token any
	n     float64
	last  time.Time
	buf   strings.Builder
}

func newProgress(ctx context.Context, req *mcp.CallToolRequest) *progress {
	return &progress{ctx: ctx, req: req, token: req.Params.GetProgressToken()}
}

func (p *progress) add(text string) {
	if p.token == nil {
		return
	}
	p.buf.WriteString(text)
	if time.Since(p.last) < progressEvery {
		return
	}
	p.flush()
}

func (p *progress) flush() {
	if p.token == nil || p.buf.Len() == 0 {
		return
	}
	p.n++
	p.last = time.Now()
	msg := tail(p.buf.String(), 4<<10)
	p.buf.Reset()
	p.req.Session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: p.n, Message: msg})
}

func (s *Server) executeCode(ctx context.Context, req *mcp.CallToolRequest, in ExecuteIn) (*mcp.CallToolResult, ExecuteOut, error) {
	// Every result, a failed one too, is validated against the schema:
	// its arrays must be arrays.
	out := ExecuteOut{Results: []map[string]any{}, Files: []FileOut{}}
	t, err := timeout(in.TimeoutS)
	if err != nil {
		return failed(err), out, nil
	}
	api := s.o.Client(header(req.Extra))
	id, note, err := s.session(ctx, req, api, in.SessionID)
	if err != nil {
		return failed(err), out, nil
	}
	out.SessionID, out.Note = id, note
	pr := newProgress(ctx, req)
	var onEvent func(apitype.Event)
	if pr.token != nil {
		onEvent = func(ev apitype.Event) {
			switch ev.Type {
			case apitype.EventStdout, apitype.EventStderr:
				pr.add(ev.Text)
			case apitype.EventDisplay, apitype.EventResult:
				pr.add("[" + ev.Type + "]\n")
			}
		}
	}
	release, err := s.turn(ctx, req.Session, id)
	if err != nil {
		return failed(err), out, nil
	}
	defer release()
	// Another language runs in its context of the same sandbox.
	res, err := execute(ctx, api, id, apitype.ExecuteRequest{Code: in.Code, Timeout: t, Language: in.Language}, onEvent)
	pr.flush()
	if err != nil {
		return failed(err), out, nil
	}
	r, out := executeResult(id, note, res, s.blocks(req.Extra))
	return r, out, nil
}

func (s *Server) runCommand(ctx context.Context, req *mcp.CallToolRequest, in CommandIn) (*mcp.CallToolResult, CommandOut, error) {
	var out CommandOut
	t, err := timeout(in.TimeoutS)
	if err != nil {
		return failed(err), out, nil
	}
	api := s.o.Client(header(req.Extra))
	id, note, err := s.session(ctx, req, api, in.SessionID)
	if err != nil {
		return failed(err), out, nil
	}
	out.SessionID, out.Note = id, note
	pr := newProgress(ctx, req)
	var onEvent func(apitype.Event)
	if pr.token != nil {
		onEvent = func(ev apitype.Event) {
			if ev.Type == apitype.EventStdout || ev.Type == apitype.EventStderr {
				pr.add(ev.Text)
			}
		}
	}
	res, err := api.RunCommand(ctx, id, apitype.CommandRequest{Command: in.Command, Timeout: t, Cwd: in.Cwd}, onEvent)
	pr.flush()
	if err != nil {
		return failed(err), out, nil
	}
	r, out := commandResult(id, note, res)
	return r, out, nil
}

func (s *Server) writeFile(ctx context.Context, req *mcp.CallToolRequest, in WriteIn) (*mcp.CallToolResult, WriteOut, error) {
	var out WriteOut
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf8":
	case "base64":
		b, err := base64.StdEncoding.DecodeString(in.Content)
		if err != nil {
			return failed(argError("content is not valid base64: %v", err)), out, nil
		}
		data = b
	default:
		return failed(argError("encoding must be utf8 or base64, not %q", in.Encoding)), out, nil
	}
	p, err := workspacePath(in.Path, true)
	if err != nil {
		return failed(err), out, nil
	}
	if len(data) > writeMax {
		return failed(fmt.Errorf("%w: the content is %d bytes, more than write_file takes (%d); upload it with PUT /v1/sessions/{id}/files/{path}", errdefs.ErrTooLarge, len(data), writeMax)), out, nil
	}
	api := s.o.Client(header(req.Extra))
	id, _, err := s.session(ctx, req, api, in.SessionID)
	if err != nil {
		return failed(err), out, nil
	}
	res, err := api.Upload(ctx, id, p, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return failed(err), out, nil
	}
	out = WriteOut{SessionID: id, Path: res.Path, Size: res.Size, URI: fileURI(id, res.Path)}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("wrote /workspace/%s (%d bytes) [session %s]", res.Path, res.Size, id)}}}, out, nil
}

func (s *Server) readFile(ctx context.Context, req *mcp.CallToolRequest, in ReadIn) (*mcp.CallToolResult, any, error) {
	max := in.MaxBytes
	if max <= 0 {
		max = readDefault
	}
	if max > readMax {
		max = readMax
	}
	p, err := workspacePath(in.Path, true)
	if err != nil {
		return failed(err), nil, nil
	}
	api := s.o.Client(header(req.Extra))
	id, _, err := s.session(ctx, req, api, in.SessionID)
	if err != nil {
		return failed(err), nil, nil
	}
	content, err := s.fileContent(ctx, api, id, p, max, s.blocks(req.Extra))
	if err != nil {
		return failed(err), nil, nil
	}
	return &mcp.CallToolResult{Content: content}, nil, nil
}

// fileContent reads up to max bytes of a session's file (p, a cleaned
// workspace path) as MCP content: text, or an image or an embedded blob
// when bl allows them, else a line that says what the file is.
func (s *Server) fileContent(ctx context.Context, api *client.Client, id, p string, max int64, bl blocks) ([]mcp.Content, error) {
	rc, err := api.Download(ctx, id, p)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, err
	}
	truncated := int64(len(data)) > max
	if truncated {
		data = data[:max]
	}
	mime := mimeOf(p)
	if mime == "application/octet-stream" {
		mime = http.DetectContentType(data)
	}
	uri := fileURI(id, p)
	var content []mcp.Content
	image := strings.HasPrefix(mime, "image/") && mime != "image/svg+xml"
	switch {
	case image && !truncated && bl.image:
		content = append(content, &mcp.ImageContent{Data: data, MIMEType: mime})
	case !image && utf8.Valid(data):
		content = append(content, &mcp.TextContent{Text: string(data)})
	case !image && bl.resource:
		content = append(content, &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: uri, MIMEType: mime, Blob: data}})
	default:
		// Its bytes as text would be base64 in the model's context.
		what := "a binary file"
		if image {
			what = "an image"
		}
		content = append(content, &mcp.TextContent{Text: fmt.Sprintf("/workspace/%s is %s (%s, %d bytes read): not attached, "+
			"this connection takes text only; run_command can look into it (file, xxd | head), or code can describe it", p, what, mime, len(data))})
	}
	if truncated {
		content = append(content, &mcp.TextContent{Text: fmt.Sprintf("(only the first %d bytes; the file is larger — read more with max_bytes, or download it with GET /v1/sessions/%s/files/%s)", max, id, p)})
	}
	return content, nil
}

func (s *Server) listFiles(ctx context.Context, req *mcp.CallToolRequest, in ListIn) (*mcp.CallToolResult, ListOut, error) {
	out := ListOut{Entries: []EntryOut{}}
	dir, err := workspacePath(in.Path, false)
	if err != nil {
		return failed(err), out, nil
	}
	api := s.o.Client(header(req.Extra))
	id, _, err := s.session(ctx, req, api, in.SessionID)
	if err != nil {
		return failed(err), out, nil
	}
	list, err := api.ListFiles(ctx, id, dir, in.Recursive)
	if err != nil {
		return failed(err), out, nil
	}
	out = ListOut{SessionID: id, Path: list.Path, Truncated: list.Truncated, Entries: []EntryOut{}}
	entries := list.Entries
	if len(entries) > maxEntries {
		out.Truncated, out.EntriesDropped = true, len(entries)-maxEntries
		entries = entries[:maxEntries]
	}
	var b strings.Builder
	for _, e := range entries {
		out.Entries = append(out.Entries, EntryOut{Path: e.Path, Type: e.Type, Size: e.Size})
		fmt.Fprintf(&b, "%-7s %10d  %s\n", e.Type, e.Size, e.Path)
	}
	if len(list.Entries) == 0 {
		b.WriteString("(empty)\n")
	}
	if out.EntriesDropped > 0 {
		fmt.Fprintf(&b, "(and %d more entries: MCP results list at most %d; list a subdirectory)\n", out.EntriesDropped, maxEntries)
	}
	if list.Truncated {
		b.WriteString("(the listing is truncated at the server's cap)\n")
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, out, nil
}

func (s *Server) createSession(ctx context.Context, req *mcp.CallToolRequest, in CreateIn) (*mcp.CallToolResult, SessionOut, error) {
	out := SessionOut{Limits: map[string]any{}}
	// The API's own request, decoded as the API decodes it; the API
	// validates and admits it (limits, network policy) as any other.
	m := map[string]any{"language": in.Language, "limits": in.Limits, "env": in.Env}
	if in.IdleTimeout != "" {
		m["timeout_idle"] = in.IdleTimeout
	}
	if in.Network != nil {
		m["network"] = in.Network
	}
	if in.Template != "" {
		m["template"] = in.Template
	}
	if len(in.Tools) > 0 {
		m["tools"] = in.Tools
	}
	if len(in.Secrets) > 0 {
		m["secrets"] = in.Secrets
	}
	body, _ := json.Marshal(m)
	var cr apitype.CreateSessionRequest
	if err := config.Decode(body, &cr); err != nil {
		return failed(err), out, nil
	}
	// A paused session resumes when a tool names it (pause_session, or
	// a restart of the server).
	cr.AutoResume = true
	api := s.o.Client(header(req.Extra))
	c := s.conn(req.Session)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return failed(errClosing), out, nil
	}
	info, err := api.CreateSession(identity.WithOwnMetadata(ctx, s.metadata()), cr)
	if err != nil {
		return failed(err), out, nil
	}
	// It ends with the connection, like the default sessions.
	c.created[info.ID] = struct{}{}
	if c.header == nil {
		c.header = header(req.Extra)
	}
	out = sessionOut(info)
	msg := fmt.Sprintf("created %s session %s (pass it as session_id)", info.Language, info.ID)
	if info.Network != nil {
		msg += "; it may reach: " + strings.Join(info.Network.Allow, ", ")
		if len(info.Network.Allow) == 0 {
			msg += "nothing yet"
		}
	}
	if len(info.Tools) > 0 {
		msg += "; its code may call the tools " + strings.Join(info.Tools, ", ") + " (from airlock_tools import call; call(name, **arguments))"
	}
	for _, sec := range info.Secrets {
		msg += fmt.Sprintf("; $%s holds a placeholder for the secret %s, sent as its value only to %s", sec.EnvVar, sec.Name, strings.Join(sec.Hosts, ", "))
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, out, nil
}

// listSecrets lists the secrets create_session may give a session.
func (s *Server) listSecrets(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, SecretsOut, error) {
	out := SecretsOut{Secrets: []SecretOut{}}
	list, err := s.o.Client(header(req.Extra)).Secrets(ctx)
	if err != nil {
		return failed(err), out, nil
	}
	var b strings.Builder
	for _, sec := range list.Secrets {
		out.Secrets = append(out.Secrets, secretOut(sec))
		fmt.Fprintf(&b, "%s: a placeholder in $%s, sent as the value only to %s\n", sec.Name, sec.EnvVar, strings.Join(sec.Hosts, ", "))
	}
	if len(list.Secrets) == 0 {
		b.WriteString("this server declares no secrets for you\n")
	}
	text, _ := clip(b.String(), fieldCap)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}

func secretOut(i apitype.SecretInfo) SecretOut {
	return SecretOut{Name: i.Name, EnvVar: i.EnvVar, Hosts: append([]string{}, i.Hosts...)}
}

func sessionOut(info *apitype.Session) SessionOut {
	var limits map[string]any
	b, _ := json.Marshal(info.Limits)
	json.Unmarshal(b, &limits)
	out := SessionOut{SessionID: info.ID, Language: info.Language, State: info.State, Limits: limits, IdleTimeout: info.IdleTimeout.String(), Template: info.Template}
	if info.Network != nil {
		out.Network = append([]string{}, info.Network.Allow...)
	}
	out.Tools = info.Tools
	for _, sec := range info.Secrets {
		out.Secrets = append(out.Secrets, secretOut(sec))
	}
	return out
}

func (s *Server) closeSession(ctx context.Context, req *mcp.CallToolRequest, in CloseIn) (*mcp.CallToolResult, CloseOut, error) {
	if err := sessionArg(in.SessionID); err != nil {
		return failed(err), CloseOut{SessionID: in.SessionID}, nil
	}
	api := s.o.Client(header(req.Extra))
	err := api.DeleteSession(ctx, in.SessionID)
	if err != nil && client.StatusOf(err) != http.StatusGone {
		return failed(err), CloseOut{SessionID: in.SessionID}, nil
	}
	c := s.conn(req.Session)
	c.mu.Lock()
	for lang, id := range c.sessions {
		if id == in.SessionID {
			delete(c.sessions, lang)
		}
	}
	delete(c.created, in.SessionID)
	c.mu.Unlock()
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "closed session " + in.SessionID}}}, CloseOut{SessionID: in.SessionID, Closed: true}, nil
}

// readCapped reads r, failing beyond max bytes.
func readCapped(r io.Reader, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%w: the file is larger than %d bytes; download it with the HTTP files API", errdefs.ErrTooLarge, max)
	}
	return data, nil
}

func (s *Server) listTools(ctx context.Context, req *mcp.CallToolRequest, in ToolsIn) (*mcp.CallToolResult, ToolsOut, error) {
	out := ToolsOut{SessionID: in.SessionID, Tools: []ToolOut{}}
	api := s.o.Client(header(req.Extra))
	var list *apitype.ToolList
	var err error
	if in.SessionID != "" {
		if err := sessionArg(in.SessionID); err != nil {
			return failed(err), out, nil
		}
		list, err = api.SessionTools(ctx, in.SessionID)
	} else {
		list, err = api.Tools(ctx)
	}
	if err != nil {
		return failed(err), out, nil
	}
	var b strings.Builder
	for _, t := range list.Tools {
		var args any
		json.Unmarshal(t.Arguments, &args)
		out.Tools = append(out.Tools, ToolOut{Name: t.Name, Description: t.Description, Kind: t.Kind, Writable: t.Writable, Arguments: args})
		fmt.Fprintf(&b, "%s (%s%s): %s\n  arguments: %s\n", t.Name, t.Kind, map[bool]string{true: ", writable"}[t.Writable], t.Description, t.Arguments)
	}
	if len(list.Tools) == 0 {
		if in.SessionID != "" {
			b.WriteString("this session has no tools (they are chosen by create_session's \"tools\")\n")
		} else {
			b.WriteString("this server declares no tools for you\n")
		}
	}
	text, _ := clip(b.String(), fieldCap)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}
