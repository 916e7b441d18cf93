// Package directory owns this server's part of the store's sessions
// directory: it writes its sessions there as they are created and end (a
// session.Observer whose methods only queue; one writer commits in
// batches), sends the server's heartbeat every third of
// store.lease_timeout (each beat also rewrites its live sessions, so the
// others see them at most a beat old, and marks the sessions of servers
// that stopped beating ended), and lists a tenant's sessions across the
// cluster: this server's from memory, the others' from the store, each
// with the pod it lives on. Paused sessions are in it too, with their
// pod: they outlive their server, and a pod started again on its volume
// takes them back (SyncPaused ends those it no longer holds).
//
// A client's change of a session is listed everywhere before the client
// hears of it: a creation (Register), and a delete, pause or resume
// (Settle, which the session manager waits for); what a session does by
// itself (an end, an idle pause) is written within a beat.
//
// It must never hold a request on the store beyond one bounded read (a
// listing) or one bounded write of the session the request changed,
// never block an observer call, never write a session ended from a
// listing (ends are written from their events: a session being paused
// is listed ended for a moment), and never hide a store it cannot
// reach: Health says so, for /readyz.
package directory

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/identity"
	"airlock/internal/session"
	"airlock/internal/store"
)

// Sessions are the server's own sessions (the session manager).
type Sessions interface {
	// List describes every live and paused session.
	List() []apitype.Session
	// Describe describes a live or paused session; an error says it is
	// neither (ended, or unknown).
	Describe(ctx context.Context, id string) (apitype.Session, error)
}

// Directory is the running directory of one server.
type Directory struct {
	db    *store.DB
	local Sessions
	log   *slog.Logger
	every time.Duration

	q chan apitype.Session
	// settles are Settle's requests, served by the writer.
	settles chan settle
	// kick asks for this server's sessions to be written now (a pause);
	// loaded says the server has loaded what it paused before (see
	// Loaded).
	kick   chan struct{}
	loaded chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	mu sync.Mutex
	// err is the last failure to reach the store (nil: the last beat
	// and write went through).
	err error
}

// New starts the directory of the server db serves (see store.Serve):
// local is the server's own sessions, every is how often it beats.
func New(db *store.DB, local Sessions, every time.Duration, log *slog.Logger) *Directory {
	if log == nil {
		log = slog.Default()
	}
	d := &Directory{db: db, local: local, log: log, every: every, q: make(chan apitype.Session, 4096), settles: make(chan settle, 64),
		kick: make(chan struct{}, 1), loaded: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go d.run()
	return d
}

// Health is nil while the store takes the directory's writes, else why
// not.
func (d *Directory) Health() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

func (d *Directory) setErr(err error) {
	d.mu.Lock()
	was := d.err
	d.err = err
	d.mu.Unlock()
	switch {
	case err != nil && was == nil:
		d.log.Error("the sessions directory cannot reach the store; this server's sessions may be listed as lost elsewhere until it can", "err", err)
	case err == nil && was != nil:
		d.log.Info("the sessions directory reaches the store again")
	}
}

// List is the sessions who sees, across every server sharing the store:
// this server's as they are now, the others' as their last beat or
// change wrote them (Pod says where each lives). The store unreachable is
// an error (503), never a partial list.
func (d *Directory) List(ctx context.Context, who identity.Identity) ([]apitype.Session, error) {
	others, err := d.db.ListSessions(ctx, who.Tenant, who.Admin)
	if err != nil {
		return nil, err
	}
	pod := d.db.ServerPod()
	out := make([]apitype.Session, 0, len(others))
	mine := map[string]bool{}
	for _, s := range d.local.List() {
		if who.Sees(s.Tenant) {
			s.Pod = pod
			out = append(out, s)
			mine[s.ID] = true
		}
	}
	for _, s := range others {
		// A paused session an earlier run of this pod wrote, until the
		// next beat writes it under this one: listed once.
		if !mine[s.ID] {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// Loaded says the server has loaded the sessions it paused before (an
// earlier run's, at its shutdown): from the next beat on, paused sessions
// of this pod it does not hold are marked ended in the directory.
func (d *Directory) Loaded() {
	select {
	case <-d.loaded:
	default:
		close(d.loaded)
	}
	d.wake()
}

func (d *Directory) wake() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Close writes what is queued, and stops.
func (d *Directory) Close() {
	d.once.Do(func() {
		close(d.stop)
		<-d.done
	})
}

func (d *Directory) run() {
	defer close(d.done)
	beat := time.NewTicker(d.every)
	defer beat.Stop()
	d.beat()
	var pending []apitype.Session
	for {
		select {
		case s := <-d.q:
			pending = append(pending, s)
			// What arrives meanwhile joins the batch.
			deadline := time.NewTimer(20 * time.Millisecond)
		more:
			for len(pending) < 512 {
				select {
				case s := <-d.q:
					pending = append(pending, s)
				case <-deadline.C:
					break more
				}
			}
			deadline.Stop()
			pending, _ = d.write(pending)
		case r := <-d.settles:
			// Those asking meanwhile are served by the same writes.
			reqs := []settle{r}
			for len(d.settles) > 0 {
				reqs = append(reqs, <-d.settles)
			}
			pending = d.settle(pending, reqs)
		case <-beat.C:
			d.beat()
		case <-d.kick:
			d.beat()
		case <-d.stop:
			for len(d.q) > 0 {
				pending = append(pending, <-d.q)
			}
			d.write(pending)
			// What a shutdown paused, listed as paused (a pause is not
			// an end: see SessionEnded).
			if err := d.db.PutSessions(context.Background(), d.current()); err != nil {
				d.setErr(err)
			}
			return
		}
	}
}

// write puts sessions in the store; on failure it returns them to try
// again with the next ones (a beat rewrites every live one anyway: what
// is kept is only ends, bounded).
func (d *Directory) write(batch []apitype.Session) ([]apitype.Session, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	if err := d.db.PutSessions(context.Background(), batch); err != nil {
		d.setErr(err)
		var ends []apitype.Session
		for _, s := range batch {
			if s.State == apitype.StateEnded && len(ends) < 4096 {
				ends = append(ends, s)
			}
		}
		return ends, err
	}
	return nil, nil
}

// current is the server's live and paused sessions as they are now. A
// session listed ended is ending this moment (or being paused): its end
// event says which, and is written from there.
func (d *Directory) current() []apitype.Session {
	all := d.local.List()
	out := all[:0]
	for _, s := range all {
		if s.State != apitype.StateEnded {
			out = append(out, s)
		}
	}
	return out
}

// settle is a request of Settle's: done hears how its writes went.
type settle struct {
	id   string
	done chan error
}

// settle writes what is queued (pending first) and the sessions reqs
// name as they are now: live or paused ones described, those gone (a
// paused session deleted: nothing is queued for it) marked ended if the
// store still lists them. It returns what is left to write.
func (d *Directory) settle(pending []apitype.Session, reqs []settle) []apitype.Session {
	for len(d.q) > 0 {
		pending = append(pending, <-d.q)
	}
	pending, err := d.write(pending)
	if err == nil {
		var now []apitype.Session
		var gone []string
		for _, r := range reqs {
			s, derr := d.local.Describe(context.Background(), r.id)
			switch {
			case derr != nil:
				gone = append(gone, r.id)
			case s.State != apitype.StateEnded:
				now = append(now, s)
			}
		}
		ctx := context.Background()
		if err = d.db.PutSessions(ctx, now); err == nil {
			err = d.db.EndSessions(ctx, gone, string(apitype.EndDeleted))
		}
		if err != nil {
			d.setErr(err)
		}
	}
	for _, r := range reqs {
		r.done <- err
	}
	return pending
}

// Settle writes the session id of this server as it is now (live,
// paused, or gone), after what was queued before, and returns once the
// store has it: a client told that the session was deleted, paused or
// resumed finds every server listing it so. With a store of one
// machine's it does nothing (this server lists its own sessions from
// memory). It waits at most a beat's interval, and not at all while the
// store fails the directory's writes (Health): the session is written
// when it can be, as a beat would.
func (d *Directory) Settle(ctx context.Context, id string) error {
	if !d.db.Shared() {
		return nil
	}
	r := settle{id: id, done: make(chan error, 1)}
	if err := d.Health(); err != nil {
		select {
		case d.settles <- r:
		default:
		}
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d.every)
	defer cancel()
	select {
	case d.settles <- r:
	case <-d.done:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-d.done:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errClosed: the directory stopped (the server is shutting down).
var errClosed = errors.New("the sessions directory is closed")

// beat sends the heartbeat and rewrites the server's live sessions.
func (d *Directory) beat() {
	ctx := context.Background()
	// One snapshot for both: a session resumed meanwhile is held.
	local := d.current()
	b, err := d.db.Heartbeat(ctx)
	if err == nil {
		err = d.db.PutSessions(ctx, local)
	}
	if err != nil {
		d.setErr(err)
		return
	}
	select {
	case <-d.loaded:
		held := map[string]bool{}
		for _, s := range local {
			if s.State == apitype.StatePaused {
				held[s.ID] = true
			}
		}
		if n, err := d.db.SyncPaused(ctx, held); err != nil {
			d.setErr(err)
			return
		} else if n > 0 {
			d.log.Info("paused sessions this pod no longer holds marked ended in the directory", "sessions", n)
		}
	default:
	}
	d.setErr(nil)
	if b.Revived {
		d.log.Warn("this server was taken for dead by the others (no heartbeat within store.lease_timeout); its sessions are listed again")
	}
	if b.Reaped > 0 {
		d.log.Info("sessions of servers that stopped sending heartbeats marked ended", "sessions", b.Reaped)
	}
}

// The session.Observer: sessions created and ended are queued.

var _ session.Observer = (*Directory)(nil)

func (d *Directory) enqueue(s apitype.Session) {
	select {
	case d.q <- s:
	default:
		// The next beat writes every live session; an end it misses
		// shows as lost with the server, at worst.
	}
}

// Register writes a session just created, before its creator hears of
// it: any server of a shared store lists it from then on. A store of one
// machine's is written off the request path (this server lists its own
// sessions from memory), so that its disk never fails a creation.
func (d *Directory) Register(ctx context.Context, s apitype.Session) error {
	if !d.db.Shared() {
		d.enqueue(s)
		return nil
	}
	return d.db.PutSessions(ctx, []apitype.Session{s})
}

// SessionCreated: the API registers what it creates (Register); a beat
// writes every live session anyway.
func (d *Directory) SessionCreated(session.SessionEvent) {}

func (d *Directory) SessionEnded(e session.SessionEvent) {
	if e.End.Code == apitype.EndPaused {
		// Not an end: the session is listed paused from now on (the
		// manager's list has it, with its pause's details).
		d.wake()
		return
	}
	d.enqueue(apitype.Session{ID: e.Session, Tenant: e.Tenant, Language: e.Language, Sandbox: e.Sandbox, Limits: e.Limits,
		State: apitype.StateEnded, EndReason: e.End.Reason, Executions: e.Executions, CreatedAt: time.Now().Add(-e.Duration).UTC()})
}

func (d *Directory) ExecutionStarted(session.ExecutionEvent)  {}
func (d *Directory) ExecutionFinished(session.ExecutionEvent) {}
func (d *Directory) FileTransferred(session.FileEvent)        {}
func (d *Directory) NetworkChanged(session.NetworkEvent)      {}
func (d *Directory) PortUsed(session.PortEvent)               {}
func (d *Directory) ToolCalled(session.ToolCallEvent)         {}
