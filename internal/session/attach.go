package session

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"unicode/utf8"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// Clients following a command's output: its foreground client, and any
// number attached by id (AttachCommand), who may leave and come back.

// watcherBuffer is how many events an attached client may fall behind
// before it is detached (it attaches again, and replays).
const watcherBuffer = 1024

// watcher is a client attached to a command's output: its events, the
// last of them the end; closed early when the client fell behind.
type watcher struct{ ch chan apitype.Event }

// followers are what a command's output goes to as it comes; the
// command's mu guards them.
type followers struct {
	// emit is the foreground client's (nil: none).
	emit     func(apitype.Event)
	watchers map[*watcher]struct{}
	// sent is the output streamed so far, for a client that attaches
	// late: the last sentMax bytes of it (a terminal's screen is its
	// latest output); dropped once the command ended (its result has
	// the output then).
	sent      []apitype.Event
	sentBytes int
	sentMax   int
}

// outputEvent is a chunk of a stream as an event: its text, or, for a
// terminal's output (lossless), its bytes when they are not UTF-8.
func outputEvent(kind string, b []byte, lossless bool) apitype.Event {
	if lossless && !utf8.Valid(b) {
		return apitype.Event{Type: kind, DataBase64: base64.StdEncoding.EncodeToString(b)}
	}
	return apitype.Event{Type: kind, Text: toValidUTF8(b)}
}

// publishLocked sends an output event to every follower and keeps it for
// late ones; cmd.mu is held. A watcher that fell behind is detached.
func (cmd *command) publishLocked(ev apitype.Event) {
	f := &cmd.follow
	if f.emit != nil {
		f.emit(ev)
	}
	f.sentBytes += eventSize(ev)
	if last := len(f.sent) - 1; last >= 0 && f.sent[last].Type == ev.Type && ev.Type != apitype.EventTruncated &&
		f.sent[last].DataBase64 == "" && ev.DataBase64 == "" && len(f.sent[last].Text) < 64<<10 {
		f.sent[last].Text += ev.Text // a terminal's output comes in small chunks
	} else {
		f.sent = append(f.sent, ev)
	}
	for len(f.sent) > 1 && f.sentBytes > f.sentMax {
		f.sentBytes -= eventSize(f.sent[0])
		f.sent[0] = apitype.Event{}
		f.sent = f.sent[1:]
	}
	for w := range f.watchers {
		select {
		case w.ch <- ev:
		default:
			close(w.ch)
			delete(f.watchers, w)
		}
	}
}

func eventSize(ev apitype.Event) int { return len(ev.Text) + len(ev.DataBase64) }

// endLocked tells every watcher how the command ended, and lets them go;
// cmd.mu is held and cmd.res set.
func (cmd *command) endLocked() {
	f := &cmd.follow
	res := *cmd.res
	for w := range f.watchers {
		select {
		case w.ch <- apitype.Event{Type: apitype.EventEnd, Command: &res}:
		default: // it fell behind: it hears so
		}
		close(w.ch)
		delete(f.watchers, w)
	}
	f.sent, f.sentBytes = nil, 0
}

// AttachCommand follows a command of the session by id: with replay,
// first what it printed so far (as streamed: redacted, capped at
// max_output per stream), then its output as it comes, and last an end
// event with how it ended. It returns once the end is emitted, when ctx
// is done (the command runs on), or with errdefs.ErrLimit when emit fell
// too far behind the output. Any number of clients may attach at once,
// and again after they left.
func (s *Session) AttachCommand(ctx context.Context, id string, replay bool, emit func(apitype.Event)) error {
	cmd, err := s.command(id)
	if err != nil {
		return err
	}
	cmd.mu.Lock()
	if cmd.res != nil {
		res := *cmd.res
		cmd.mu.Unlock()
		if replay {
			for _, ev := range []apitype.Event{{Type: apitype.EventStdout, Text: res.Stdout}, {Type: apitype.EventStderr, Text: res.Stderr}} {
				if ev.Text != "" {
					emit(ev)
				}
			}
		}
		emit(apitype.Event{Type: apitype.EventEnd, Command: &res})
		return nil
	}
	var past []apitype.Event
	if replay {
		past = slices.Clone(cmd.follow.sent)
	}
	w := &watcher{ch: make(chan apitype.Event, watcherBuffer)}
	if cmd.follow.watchers == nil {
		cmd.follow.watchers = map[*watcher]struct{}{}
	}
	cmd.follow.watchers[w] = struct{}{}
	cmd.mu.Unlock()
	defer func() {
		cmd.mu.Lock()
		delete(cmd.follow.watchers, w)
		cmd.mu.Unlock()
	}()
	for _, ev := range past {
		emit(ev)
	}
	for {
		select {
		case ev, ok := <-w.ch:
			if !ok {
				return fmt.Errorf("%w: the client read command %s's output too slowly and was detached; attach again (with replay, what it printed so far is sent first)", errdefs.ErrLimit, cmd.id)
			}
			emit(ev)
			if ev.Type == apitype.EventEnd {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
