package broker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// Session is one session's side of the broker: the tools it opted in
// to, its counters, and where its calls are reported.
type Session struct {
	b      *Broker
	id     string
	tenant string
	names  []string
	tools  map[string]*tool
	report func(apitype.ToolCall)
	redact func(json.RawMessage) json.RawMessage

	// mu guards buckets, used, day and inflight.
	mu       sync.Mutex
	buckets  map[string]*bucket
	used     map[string]int // calls per tool on day
	day      string
	inflight int

	// The in-sandbox endpoint (endpoint.go), once served.
	ep *endpoint
}

// SessionOptions describe a session to the broker.
type SessionOptions struct {
	ID, Tenant string
	// Tools are the session's tools (Resolve's answer).
	Tools []string
	// Report hears every call, before its answer goes back to the
	// sandbox (nil: nobody); it must not block.
	Report func(apitype.ToolCall)
	// Redact applies the session's output policy to a call's recorded
	// arguments (nil: none).
	Redact func(json.RawMessage) json.RawMessage
}

// NewSession makes a session's side of the broker.
func (b *Broker) NewSession(o SessionOptions) *Session {
	s := &Session{b: b, id: o.ID, tenant: o.Tenant, names: o.Tools, tools: map[string]*tool{}, report: o.Report, redact: o.Redact,
		buckets: map[string]*bucket{}, used: map[string]int{}}
	for _, n := range o.Tools {
		if t := b.lookup(o.Tenant, n); t != nil {
			s.tools[n] = t
		}
	}
	return s
}

// Tools describes the session's tools.
func (s *Session) Tools() []apitype.ToolInfo { return s.b.Describe(s.tenant, s.names) }

// Names are the session's tools' names.
func (s *Session) Names() []string { return s.names }

// Result is what a tool answered, as the sandbox gets it: the HTTP
// status or the command's exit status, and the body (or stdout) as JSON
// when it is JSON, else as text when it is UTF-8, else as base64.
type Result struct {
	// Kind is the tool's: "http" or "command".
	Kind        string          `json:"kind"`
	Status      int             `json:"status"`
	ContentType string          `json:"content_type,omitempty"`
	JSON        json.RawMessage `json:"json,omitempty"`
	Text        *string         `json:"text,omitempty"`
	Base64      string          `json:"base64,omitempty"`
	// Stderr is a command's, its last 4 KiB.
	Stderr string `json:"stderr,omitempty"`
	// Bytes is the size of the body.
	Bytes int `json:"bytes"`
}

// bucket is a token bucket.
type bucket struct {
	tokens float64
	last   time.Time
}

// take takes a token at rate per minute with burst; when there is none
// it says how long until there is.
func (b *bucket) take(now time.Time, perMinute, burst int) (bool, time.Duration) {
	rate := float64(perMinute) / 60
	if b.last.IsZero() {
		b.tokens = float64(burst)
	} else {
		b.tokens = math.Min(float64(burst), b.tokens+now.Sub(b.last).Seconds()*rate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / rate * float64(time.Second))
}

// maxRecordedArgs bounds the arguments a record keeps.
const maxRecordedArgs = 4 << 10

// Call makes one call of tool name with the JSON arguments body: the
// checks, the call with the credential, the scrubbed answer. The record
// is reported (and returned) whatever the decision.
func (s *Session) Call(ctx context.Context, name string, body []byte) (*Result, *Refusal, apitype.ToolCall) {
	start := s.b.now()
	rec := apitype.ToolCall{Tool: clip(name, 64), Time: start.UTC(), BytesIn: int64(len(body))}
	rec.Context, _ = ctx.Value(fromKey{}).(string)
	res, ref, args := s.call(ctx, name, body, start)
	rec.DurationMs = float64(s.b.now().Sub(start).Microseconds()) / 1000
	t := s.tools[name]
	switch {
	case ref == nil:
		rec.Decision = apitype.ToolOK
		st := res.Status
		rec.Status, rec.BytesOut = &st, int64(res.Bytes)
	case ref.failed:
		rec.Decision = apitype.ToolFailed
	default:
		rec.Decision = apitype.ToolRefused
	}
	if ref != nil {
		if t != nil {
			ref.Msg = t.scrub(ref.Msg)
		}
		rec.Code, rec.Reason, rec.Field, rec.Rule = errdefs.Code(ref), ref.Msg, ref.Field, ref.Rule
	}
	rec.Arguments, rec.ArgumentsTruncated = s.recordArgs(t, args, body)
	if s.report != nil {
		s.report(rec)
	}
	return res, ref, rec
}

func (s *Session) call(ctx context.Context, name string, body []byte, now time.Time) (*Result, *Refusal, map[string]any) {
	t, ok := s.tools[name]
	if !ok {
		have := "it has none"
		if len(s.names) > 0 {
			have = "its tools are: " + strings.Join(s.names, ", ")
		}
		return nil, &Refusal{Kind: errdefs.ErrNotFound, Rule: "tool", Msg: fmt.Sprintf("this session has no tool %q (%s); tools are chosen when the session is created", clip(name, 64), have)}, nil
	}
	if max := int(s.b.cfg.MaxArgumentBytes); len(body) > max {
		return nil, &Refusal{Kind: errdefs.ErrTooLarge, Rule: "max_argument_bytes", Msg: fmt.Sprintf("the arguments are %d bytes, more than the %d a call may send", len(body), max)}, nil
	}
	if ref := s.takeRate(t, now); ref != nil {
		return nil, ref, nil
	}
	args, ref := decodeArgs(body)
	if ref != nil {
		return nil, ref, nil
	}
	if ref := t.schema.validate(args); ref != nil {
		return nil, ref, args
	}
	req, ref := t.prepare(args)
	if ref != nil {
		return nil, ref, args
	}
	if ref := s.takeBudget(t, now); ref != nil {
		return nil, ref, args
	}
	release, ref := s.admit()
	if ref != nil {
		return nil, ref, args
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout.D())
	defer cancel()
	var res *Result
	if t.url != nil {
		res, ref = s.b.callHTTP(ctx, t, req)
	} else {
		res, ref = s.b.runCommand(ctx, t, req)
	}
	if ref != nil {
		ref.failed = true
		return nil, ref, args
	}
	return res, nil, args
}

// prepared is a call with its templates expanded.
type prepared struct {
	url  string
	body []byte
	argv []string
}

// prepare expands the tool's templates for args.
func (t *tool) prepare(args map[string]any) (prepared, *Refusal) {
	var p prepared
	var err error
	if t.url != nil {
		if p.url, err = t.url.expand(args); err == nil && t.cfg.HTTP.Body == "json" {
			rest := map[string]any{}
			for k, v := range args {
				if !contains(t.urlNames, k) {
					rest[k] = v
				}
			}
			p.body, err = json.Marshal(rest)
		}
	} else {
		p.argv, err = t.argv.expand(args)
		if err == nil && t.cfg.Command.Stdin == "json" {
			p.body, err = json.Marshal(args)
		}
	}
	if ve, ok := err.(*ValueError); ok {
		return p, &Refusal{Kind: errdefs.ErrInvalidArgument, Field: ve.Field, Rule: ve.Rule, Msg: ve.Msg}
	}
	if err != nil {
		return p, &Refusal{Kind: errdefs.ErrInvalidArgument, Rule: "template", Msg: "the arguments cannot be written into the tool's request"}
	}
	return p, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// takeRate takes a token of the session's bucket of t.
func (s *Session) takeRate(t *tool, now time.Time) *Refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	bk := s.buckets[t.name]
	if bk == nil {
		bk = &bucket{}
		s.buckets[t.name] = bk
	}
	if ok, wait := bk.take(now, t.cfg.RatePerMinute, t.cfg.Burst); !ok {
		return &Refusal{Kind: errdefs.ErrQuota, Rule: "rate_per_minute", RetryAfter: wait,
			Msg: fmt.Sprintf("the tool allows %d calls a minute (bursts of %d) per session; try again in %s", t.cfg.RatePerMinute, t.cfg.Burst, roundUp(wait))}
	}
	return nil
}

// takeBudget counts a call against the session's and the tenant's daily
// budgets of t.
func (s *Session) takeBudget(t *tool, now time.Time) *Refusal {
	day := now.UTC().Format(time.DateOnly)
	untilMidnight := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour).Sub(now)
	s.mu.Lock()
	if s.day != day {
		s.day, s.used = day, map[string]int{}
	}
	if s.used[t.name] >= t.cfg.DailyPerSession {
		s.mu.Unlock()
		return &Refusal{Kind: errdefs.ErrQuota, Rule: "daily_per_session", RetryAfter: untilMidnight,
			Msg: fmt.Sprintf("this session has made its %d calls of the tool for today (UTC)", t.cfg.DailyPerSession)}
	}
	s.used[t.name]++
	s.mu.Unlock()
	if t.cfg.DailyPerTenant == 0 {
		return nil
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	k := budgetKey{s.tenant, t.name, day}
	if b.tenantDay[k] >= t.cfg.DailyPerTenant {
		s.mu.Lock()
		s.used[t.name]--
		s.mu.Unlock()
		return &Refusal{Kind: errdefs.ErrQuota, Rule: "daily_per_tenant", RetryAfter: untilMidnight,
			Msg: fmt.Sprintf("your tenant has made its %d calls of the tool for today (UTC)", t.cfg.DailyPerTenant)}
	}
	for old := range b.tenantDay {
		if old.day != day {
			delete(b.tenantDay, old)
		}
	}
	b.tenantDay[k]++
	return nil
}

// admit takes a place among the session's and the server's calls in
// flight.
func (s *Session) admit() (func(), *Refusal) {
	s.mu.Lock()
	if s.inflight >= s.b.cfg.SessionConcurrency {
		s.mu.Unlock()
		return nil, &Refusal{Kind: errdefs.ErrLimit, Rule: "session_concurrency", RetryAfter: time.Second,
			Msg: fmt.Sprintf("this session has %d tool calls in flight, the most it may; wait for one to finish", s.b.cfg.SessionConcurrency)}
	}
	s.inflight++
	s.mu.Unlock()
	select {
	case s.b.slots <- struct{}{}:
	default:
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
		return nil, &Refusal{Kind: errdefs.ErrLimit, Rule: "server_concurrency", RetryAfter: time.Second,
			Msg: "the server has as many tool calls in flight as it allows; try again shortly"}
	}
	return func() {
		<-s.b.slots
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
	}, nil
}

func roundUp(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

// recordArgs are a call's arguments as records keep them: the tool's
// redacted arguments replaced, the credential scrubbed, the output
// policy applied, at most maxRecordedArgs bytes (then cut, as a JSON
// string). Arguments that did not decode are kept as such a string too.
func (s *Session) recordArgs(t *tool, args map[string]any, body []byte) (json.RawMessage, bool) {
	var doc []byte
	if args != nil {
		shown := make(map[string]any, len(args))
		for k, v := range args {
			if t != nil && t.redactArgs[k] {
				v = "[REDACTED]"
			}
			shown[k] = v
		}
		doc, _ = json.Marshal(shown)
	} else if len(body) > 0 {
		doc, _ = json.Marshal(strings.ToValidUTF8(clip(string(body), maxRecordedArgs), "\uFFFD"))
	}
	if doc == nil {
		return nil, false
	}
	if t != nil {
		doc = []byte(t.scrub(string(doc)))
	}
	if s.redact != nil {
		doc = s.redact(doc)
	}
	if len(doc) <= maxRecordedArgs {
		return doc, false
	}
	for n := maxRecordedArgs - 16; ; n = n * 3 / 4 {
		// Escaping grows the text: cut until the string fits.
		cut, _ := json.Marshal(strings.ToValidUTF8(clip(string(doc), n), "\uFFFD"))
		if len(cut) <= maxRecordedArgs {
			return cut, true
		}
	}
}

// redacted replaces a credential in text.
const redacted = "[REDACTED:credential]"

// scrub replaces every form of the tool's credential in s.
func (t *tool) scrub(s string) string { return t.scrubber.Scrub(s) }

// scrubBytes is scrub for an answer's body; it reports whether anything
// was replaced.
func (t *tool) scrubBytes(b []byte) ([]byte, bool) {
	if len(t.forms) == 0 {
		return b, false
	}
	s := t.scrub(string(b))
	return []byte(s), s != string(b)
}

// body fills r's body from data: JSON when it is JSON (and the content
// type says so, or the tool is a command), text when it is UTF-8, else
// base64.
func (r *Result) body(data []byte, jsonHint bool) {
	r.Bytes = len(data)
	if jsonHint && json.Valid(data) {
		r.JSON = append(json.RawMessage(nil), data...)
		return
	}
	if utf8.Valid(data) {
		s := string(data)
		r.Text = &s
		return
	}
	r.Base64 = base64.StdEncoding.EncodeToString(data)
}
