package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/watch/watchtest"
)

// retryShutdownTimeout is the tests' persistence.shutdown_timeout: a
// duration no other timer of theirs has, so that the fake clock tells
// its deadline apart.
const retryShutdownTimeout = 17 * time.Second

// TestLifetimePauseRetried (issue #21): the pause at the end of a
// session's lifetime (on_timeout "pause") that fails for a passing
// reason (the disk failing) is tried again, every pauseRetry, and a try
// that succeeds pauses the session; one that never does ends it once
// persistence.shutdown_timeout after the timeout is over, with the
// timeout's code and a reason naming the failure; and one that is
// refused (a quota: trying again changes nothing) ends it at once, the
// same way, never retried. Nothing is left on disk by an end. checked
// against mutants: a failure ending the session at once, not retried
// ("retried": ended for timeout, not paused); the retry never giving up
// ("until the deadline": never ended); a refusal retried ("refused":
// never ended, its retry timer never fired).
func TestLifetimePauseRetried(t *testing.T) {
	failing := fmt.Errorf("%w: the disk failed (a test's fault)", errdefs.ErrUnavailable)
	start := func(t *testing.T, fault func(n int64) error) (*Manager, *Session, *config.Config, func() int64, *watchtest.Clock) {
		t.Helper()
		cfg := persistConfig(t)
		cfg.Persistence.ShutdownTimeout = config.Duration(retryShutdownTimeout)
		m, _, clock := newTestManager(t, cfg)
		var tries atomic.Int64
		m.imageFault = func(string) error { return fault(tries.Add(1)) }
		// Its lifetime's own timer is far off: the test ends it.
		s, err := m.Create(context.Background(), apitype.CreateSessionRequest{Language: "python", OnTimeout: apitype.OnTimeoutPause, Timeout: config.Duration(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		writeFiles(t, s, smallFiles)
		s.timedOut(apitype.Ended(apitype.EndLifetime))
		return m, s, cfg, tries.Load, clock
	}
	live := func(t *testing.T, s *Session, tries func() int64, want int64) {
		t.Helper()
		if end := s.End(); !end.Zero() || tries() != want {
			t.Fatalf("after %d failed tries: ended %+v, tried %d times", want, end, tries())
		}
	}
	// retried waits until a try failed and its retry is waited for (its
	// timer made).
	retried := func(t *testing.T, clock *watchtest.Clock, s *Session) {
		t.Helper()
		made := make(chan struct{})
		go func() { clock.Await(pauseRetry); close(made) }()
		select {
		case <-made:
		case <-s.ended:
			t.Fatalf("ended %+v, its pause not tried again", s.End())
		case <-time.After(wait):
			t.Fatal("the pause was never tried again")
		}
	}
	leftNothing := func(t *testing.T, m *Manager, s *Session, cfg *config.Config) {
		t.Helper()
		<-s.gone
		m.seals.Wait()
		if ents, _ := persisted(cfg.Persistence.Dir); len(ents) != 0 {
			t.Errorf("the end left %v", ents)
		}
	}

	t.Run("retried", func(t *testing.T) {
		m, s, _, tries, clock := start(t, func(n int64) error {
			if n <= 2 {
				return failing
			}
			return nil
		})
		// A retry's timer is made once a try failed.
		retried(t, clock, s)
		live(t, s, tries, 1)
		clock.Fire(pauseRetry)
		retried(t, clock, s)
		live(t, s, tries, 2)
		clock.Fire(pauseRetry)
		if end := ended(t, s); end.Code != apitype.EndPaused {
			t.Fatalf("ended %+v, want paused by the third try", end)
		}
		if got := tries(); got != 3 {
			t.Errorf("tried %d times, want 3", got)
		}
		if _, err := m.Describe(context.Background(), s.ID()); err != nil {
			t.Errorf("the paused session: %v", err)
		}
	})

	t.Run("until the deadline", func(t *testing.T) {
		m, s, cfg, tries, clock := start(t, func(int64) error { return failing })
		for range 2 {
			retried(t, clock, s)
			clock.Fire(pauseRetry)
		}
		retried(t, clock, s)
		live(t, s, tries, 3)
		// The deadline's timer, made as the first try began.
		fired := make(chan struct{})
		go func() { clock.Fire(retryShutdownTimeout); close(fired) }()
		select {
		case <-fired:
		case <-time.After(wait):
			t.Fatal("the retries have no deadline (persistence.shutdown_timeout)")
		}
		end := ended(t, s)
		if end.Code != apitype.EndLifetime || !strings.Contains(end.Reason, "it could not be paused: ") || !strings.Contains(end.Reason, "the disk failed") {
			t.Errorf("ended %+v, want timeout saying the pause failed and why", end)
		}
		if _, err := execute(t, s, "out x", nil); !errors.Is(err, errdefs.ErrGone) || !strings.Contains(err.Error(), "the disk failed") {
			t.Errorf("the next call: %v, want gone, saying why", err)
		}
		leftNothing(t, m, s, cfg)
	})

	t.Run("refused", func(t *testing.T) {
		m, s, cfg, tries, _ := start(t, func(int64) error {
			return fmt.Errorf("%w: quotas.max_paused_bytes is used up (a test's refusal)", errdefs.ErrQuota)
		})
		// No timer is fired: a refusal is not waited on.
		end := ended(t, s)
		if end.Code != apitype.EndLifetime || !strings.Contains(end.Reason, "it could not be paused: ") || !strings.Contains(end.Reason, "max_paused_bytes") {
			t.Errorf("ended %+v, want timeout saying the pause was refused and why", end)
		}
		if got := tries(); got != 1 {
			t.Errorf("a refused pause was tried %d times", got)
		}
		leftNothing(t, m, s, cfg)
	})
}
