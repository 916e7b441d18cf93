package mcp

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/errdefs"
)

// A session runs one execution at a time (a second one is refused as a
// conflict), but agents send tool calls in parallel and retry a call they
// cancelled at once. So a connection's executions on a session take turns
// in arrival order, a bounded number waiting; and a cancelled one
// interrupts its execution and keeps its turn until the session is free.

// queue is the turns of one connection's executions on one session.
type queue struct {
	held    bool
	waiting []chan struct{}
}

// Bounds on stopping a cancelled execution.
var (
	interruptEvery = 50 * time.Millisecond // until the execution has begun
	stopWithin     = 2 * time.Minute       // the runtime's grace is far less
)

// turn waits for the connection's turn on session id, in arrival order;
// release gives it to the next waiting call.
func (s *Server) turn(ctx context.Context, ss *mcp.ServerSession, id string) (release func(), err error) {
	c := s.conn(ss)
	c.qmu.Lock()
	q := c.queues[id]
	if q == nil {
		q = &queue{}
		c.queues[id] = q
	}
	release = func() {
		c.qmu.Lock()
		defer c.qmu.Unlock()
		if len(q.waiting) > 0 {
			next := q.waiting[0]
			q.waiting = q.waiting[1:]
			close(next)
			return
		}
		q.held = false
		delete(c.queues, id)
	}
	if !q.held {
		q.held = true
		c.qmu.Unlock()
		return release, nil
	}
	if len(q.waiting) >= s.o.MaxQueued {
		c.qmu.Unlock()
		return nil, fmt.Errorf("%w: too many calls wait for session %s (it runs code one call at a time, and at most %d may wait): wait for their results before sending more", errdefs.ErrLimit, id, s.o.MaxQueued)
	}
	mine := make(chan struct{})
	q.waiting = append(q.waiting, mine)
	c.qmu.Unlock()
	select {
	case <-mine:
		return release, nil
	case <-ctx.Done():
	}
	c.qmu.Lock()
	for i, w := range q.waiting {
		if w == mine {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			c.qmu.Unlock()
			return nil, ctx.Err()
		}
	}
	c.qmu.Unlock()
	release() // it was handed to this call as it gave up: pass it on
	return nil, ctx.Err()
}

// execute runs code in session id and returns once the execution is
// over, also when ctx ends (the client cancelled the call): then the
// execution is interrupted, and execute waits for it to stop, so that the
// next call in the queue finds the session free.
func execute(ctx context.Context, api *client.Client, id string, req apitype.ExecuteRequest, onEvent func(apitype.Event)) (*apitype.Result, error) {
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	type outcome struct {
		res *apitype.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := api.Execute(run, id, req, onEvent)
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-ctx.Done():
	}
	// Interrupt it: again until it has begun (it may still be on its
	// way), then wait for it to end.
	giveUp := time.NewTimer(stopWithin)
	defer giveUp.Stop()
	tick := time.NewTicker(interruptEvery)
	defer tick.Stop()
	for interrupted := false; ; {
		if !interrupted {
			ictx, icancel := context.WithTimeout(run, 10*time.Second)
			ok, err := api.Interrupt(ictx, id)
			icancel()
			interrupted = ok || err != nil // err: the session ended, say
		}
		select {
		case <-done:
			return nil, ctx.Err()
		case <-tick.C:
		case <-giveUp.C:
			cancel() // as if the client went away
			return nil, ctx.Err()
		}
	}
}
