package e2b

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
	"airlock/internal/session"
	"airlock/internal/workspace"
)

// watchPoll is how often a watch compares the directory with what it saw
// (the host has no inotify of a sandbox's tmpfs it could trust cheaply);
// keepalive how often an idle watch or process stream says it lives.
const (
	watchPoll = 100 * time.Millisecond
	keepalive = 20 * time.Second
	// maxWatchers bounds a sandbox's watches (streams and pollers).
	maxWatchers = 16
)

// filesystem serves envd's filesystem.Filesystem service.
func (s *Server) filesystem(w http.ResponseWriter, r *http.Request) {
	sess, box := sessionOf(r)
	files := sess.Files(r.Context())
	var req struct {
		Path        string `json:"path"`
		Depth       int    `json:"depth"`
		Source      string `json:"source"`
		Destination string `json:"destination"`
		Recursive   bool   `json:"recursive"`
		WatcherID   string `json:"watcherId"`
	}
	if err := s.readRPC(w, r, &req); err != nil {
		failRPC(w, r, err)
		return
	}
	answer := func(v any, err error) {
		if err != nil {
			failRPC(w, r, err)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, v)
	}
	method := r.PathValue("method")
	switch method {
	case "WatchDir":
		s.watchDir(w, r, sess, box, req.Path, req.Recursive)
		return
	case "GetWatcherEvents":
		answer(box.watcherEvents(files, req.WatcherID))
		return
	case "RemoveWatcher":
		box.removeWatcher(req.WatcherID)
		answer(struct{}{}, nil)
		return
	case "Move":
		from, _, err := wsPath(req.Source)
		if err != nil {
			answer(nil, err)
			return
		}
		to, prefix, err := wsPath(req.Destination)
		if err != nil {
			answer(nil, err)
			return
		}
		if err := files.Move(from, to); err != nil {
			answer(nil, err)
			return
		}
		e, err := files.Stat(to)
		answer(map[string]any{"entry": entryOf(prefix, e)}, err)
		return
	}
	rel, prefix, err := wsPath(req.Path)
	if err != nil {
		answer(nil, err)
		return
	}
	switch method {
	case "Stat":
		e, err := files.Stat(rel)
		answer(map[string]any{"entry": entryOf(prefix, e)}, err)
	case "MakeDir":
		if _, err := files.Stat(rel); err == nil {
			answer(nil, fmt.Errorf("%w: %s exists", errdefs.ErrConflict, shown(prefix, rel)))
			return
		}
		if err := files.Mkdir(rel); err != nil {
			answer(nil, err)
			return
		}
		e, err := files.Stat(rel)
		answer(map[string]any{"entry": entryOf(prefix, e)}, err)
	case "Remove":
		answer(struct{}{}, files.Remove(rel, true))
	case "ListDir":
		depth := max(req.Depth, 1)
		entries, _, err := files.List(rel, depth > 1)
		if err != nil {
			answer(nil, err)
			return
		}
		out := []entryInfo{}
		for _, e := range entries {
			if strings.Count(strings.TrimPrefix(strings.TrimPrefix(e.Path, rel), "/"), "/") < depth {
				out = append(out, entryOf(prefix, e))
			}
		}
		answer(map[string]any{"entries": out}, nil)
	case "CreateWatcher":
		answer(box.createWatcher(files, rel, req.Recursive))
	default:
		answer(nil, fmt.Errorf("%w: filesystem.Filesystem/%s", errdefs.ErrUnsupported, httpapi.Truncate(method)))
	}
}

// snapshot is what a watch saw of a directory: entries by path.
type snapshot map[string]workspace.Entry

func take(files session.Files, rel string, recursive bool) (snapshot, error) {
	entries, _, err := files.List(rel, recursive)
	if err != nil {
		return nil, err
	}
	snap := make(snapshot, len(entries))
	for _, e := range entries {
		snap[e.Path] = e
	}
	return snap, nil
}

// fsEvent is envd's FilesystemEvent.
type fsEvent struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// diff is what changed from old to cur, named relative to dir.
func diff(dir string, old, cur snapshot) []fsEvent {
	name := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, dir), "/") }
	var out []fsEvent
	for p, e := range cur {
		o, ok := old[p]
		switch {
		case !ok:
			out = append(out, fsEvent{name(p), "EVENT_TYPE_CREATE"})
			if e.Type == "file" && e.Size > 0 {
				out = append(out, fsEvent{name(p), "EVENT_TYPE_WRITE"})
			}
		case o.Size != e.Size || !o.ModTime.Equal(e.ModTime) || o.Ino != e.Ino:
			out = append(out, fsEvent{name(p), "EVENT_TYPE_WRITE"})
		case o.Mode != e.Mode:
			out = append(out, fsEvent{name(p), "EVENT_TYPE_CHMOD"})
		}
	}
	for p := range old {
		if _, ok := cur[p]; !ok {
			out = append(out, fsEvent{name(p), "EVENT_TYPE_REMOVE"})
		}
	}
	return out
}

// watchDir is envd's WatchDir: a stream of what changes in a directory,
// until the client leaves or the sandbox ends.
func (s *Server) watchDir(w http.ResponseWriter, r *http.Request, sess *session.Session, box *sandbox, p string, recursive bool) {
	rel, _, err := wsPath(p)
	if err != nil {
		failRPC(w, r, err)
		return
	}
	files := sess.Files(r.Context())
	old, err := take(files, rel, recursive)
	if err != nil {
		failRPC(w, r, err)
		return
	}
	if !box.watching(1) {
		failRPC(w, r, fmt.Errorf("%w: %d watches of this sandbox are open, the maximum", errdefs.ErrLimit, maxWatchers))
		return
	}
	defer box.watching(-1)
	st := httpapi.NewStream(w, "application/connect+json")
	defer st.Finish()
	st.Send(frame(0, map[string]any{"start": struct{}{}}))
	tick := time.NewTicker(watchPoll)
	defer tick.Stop()
	quiet := time.Now()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
		cur, err := take(files, rel, recursive)
		if err != nil {
			ce := connectErrorOf(w, err)
			st.Send(endFrame(&ce))
			return
		}
		for _, ev := range diff(rel, old, cur) {
			st.Send(frame(0, map[string]any{"filesystem": ev}))
			quiet = time.Now()
		}
		old = cur
		if time.Since(quiet) > keepalive {
			st.Send(frame(0, map[string]any{"keepalive": struct{}{}}))
			quiet = time.Now()
		}
	}
}

// poller is a watch the client polls (CreateWatcher, GetWatcherEvents).
type poller struct {
	dir       string
	recursive bool
	last      snapshot
}

// watching counts a watch in (+1) or out (-1); false: no room.
func (b *sandbox) watching(d int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d > 0 && b.watches+len(b.pollers) >= maxWatchers {
		return false
	}
	b.watches += d
	return true
}

func (b *sandbox) createWatcher(files session.Files, rel string, recursive bool) (any, error) {
	snap, err := take(files, rel, recursive)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.watches+len(b.pollers) >= maxWatchers {
		return nil, fmt.Errorf("%w: %d watches of this sandbox are open, the maximum", errdefs.ErrLimit, maxWatchers)
	}
	if b.pollers == nil {
		b.pollers = map[string]*poller{}
	}
	var rb [8]byte
	rand.Read(rb[:])
	id := hex.EncodeToString(rb[:])
	b.pollers[id] = &poller{dir: rel, recursive: recursive, last: snap}
	return map[string]string{"watcherId": id}, nil
}

func (b *sandbox) watcherEvents(files session.Files, id string) (any, error) {
	b.mu.Lock()
	p := b.pollers[id]
	b.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("%w: watcher %q not found", errdefs.ErrNotFound, httpapi.Truncate(id))
	}
	cur, err := take(files, p.dir, p.recursive)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	events := diff(p.dir, p.last, cur)
	p.last = cur
	b.mu.Unlock()
	if events == nil {
		events = []fsEvent{}
	}
	return map[string]any{"events": events}, nil
}

func (b *sandbox) removeWatcher(id string) {
	b.mu.Lock()
	delete(b.pollers, id)
	b.mu.Unlock()
}
