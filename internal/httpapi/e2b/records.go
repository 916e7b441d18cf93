package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/cluster"
	"airlock/internal/errdefs"
	"airlock/internal/identity"

	"golang.org/x/sys/unix"
)

// A sandbox outlives its server: its record (what E2B knows of it beyond
// the session) is in the store, and its access tokens are derived from
// the server's token key (a file in data_dir), never stored. A server
// restarted on the same data_dir (a StatefulSet pod on its volume) gives
// a paused sandbox the same tokens: an SDK holding them goes on.

// Record is one sandbox's record, as the store keeps it (the server
// converts: the front never imports the store).
type Record struct {
	ID, Tenant string
	// Pod is the server that holds its session.
	Pod     string
	Created time.Time
	// Info is this API's own encoding.
	Info []byte
}

// Records is where sandboxes' records are kept (the store).
type Records interface {
	PutSandbox(ctx context.Context, r Record) error
	Sandbox(ctx context.Context, id string) (Record, bool, error)
	Sandboxes(ctx context.Context, pod string) ([]Record, error)
	DeleteSandbox(ctx context.Context, id string) error
	ServerPod() string
}

// keyFile, in data_dir, holds the key sandboxes' tokens are derived from.
const keyFile = "e2b-token.key"

// loadKey reads the token key in dir, made (32 random bytes, mode 0600)
// when there is none. A key of another size is refused: tokens derived
// from a damaged key would lock every sandbox's SDK out without saying
// why.
func loadKey(dir string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: data_dir: %v", errdefs.ErrUnavailable, err)
	}
	path := filepath.Join(dir, keyFile)
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		var key [32]byte
		rand.Read(key[:])
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, key[:], 0o600); err != nil {
			return nil, fmt.Errorf("%w: writing the E2B token key: %v", errdefs.ErrUnavailable, err)
		}
		// A key another server made meanwhile wins (link fails).
		if err := os.Link(tmp, path); err != nil && !errors.Is(err, os.ErrExist) {
			os.Remove(tmp)
			return nil, fmt.Errorf("%w: writing the E2B token key: %v", errdefs.ErrUnavailable, err)
		}
		os.Remove(tmp)
		return loadKey(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: reading the E2B token key: %v", errdefs.ErrUnavailable, err)
	}
	defer f.Close()
	key, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return nil, fmt.Errorf("%w: reading the E2B token key: %v", errdefs.ErrUnavailable, err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("%w: the E2B token key %s has %d bytes, not 32: restore it from a backup, or remove it (every sandbox's access tokens change)", errdefs.ErrUnavailable, path, len(key))
	}
	return key, nil
}

// derive is sandbox id's token of kind ("envd", "traffic").
func (s *Server) derive(kind, id string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(kind))
	m.Write([]byte{0})
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil)[:24])
}

// record is a sandbox's record, as stored.
type record struct {
	Template   string            `json:"template"`
	Owner      identity.Identity `json:"owner"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Started    time.Time         `json:"started"`
	Pause      bool              `json:"pause,omitempty"`
	AutoResume bool              `json:"auto_resume,omitempty"`
	// FilesOnly: paused with keepMemory false, as a server of before
	// the pause kept it (session.PauseAsk) wrote it; Load moves it into
	// the pause. Never written now.
	FilesOnly bool `json:"files_only,omitempty"`
}

// newBox is the sandbox of session id, its tokens derived.
func (s *Server) newBox(id string, r record) *sandbox {
	return &sandbox{id: id, template: r.Template, clientID: "airlock", envdToken: s.derive("envd", id), traffic: s.derive("traffic", id),
		owner: r.Owner, metadata: r.Metadata, started: r.Started, pause: r.Pause, autoResume: r.AutoResume}
}

// save writes box's record (nothing without a store).
func (s *Server) save(ctx context.Context, box *sandbox) error {
	if s.Records == nil {
		return nil
	}
	info, _ := json.Marshal(record{Template: box.template, Owner: box.owner, Metadata: box.metadata, Started: box.started, Pause: box.pause, AutoResume: box.autoResume})
	return s.Records.PutSandbox(ctx, Record{ID: box.id, Tenant: box.owner.Tenant, Created: box.started, Info: info})
}

// adopt makes box the sandbox of its session here, unless one is
// already (which it returns).
func (s *Server) adopt(box *sandbox) *sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.boxes[box.id]; b != nil {
		return b
	}
	s.boxes[box.id] = box
	box.end = time.Now()
	return box
}

// Load adopts the sandboxes of this server's paused sessions (an earlier
// run paused them, at its shutdown say) from their records, and removes
// the records of sandboxes whose session is gone. Call it once the
// manager has loaded its paused sessions, before serving.
func (s *Server) Load(ctx context.Context) error {
	if s.Records == nil {
		return nil
	}
	recs, err := s.Records.Sandboxes(ctx, s.Records.ServerPod())
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if _, err := s.m.Get(rec.ID); !errors.Is(err, errdefs.ErrPaused) && err != nil {
			if err := s.Records.DeleteSandbox(ctx, rec.ID); err != nil {
				return err
			}
			continue
		}
		var r record
		if json.Unmarshal(rec.Info, &r) != nil {
			s.log().Error("an E2B sandbox's record is malformed; its sandbox is reachable through the v1 API only", "sandbox", rec.ID)
			continue
		}
		box := s.adopt(s.newBox(rec.ID, r))
		if r.FilesOnly {
			s.moveFilesOnly(ctx, box)
		}
	}
	return nil
}

// moveFilesOnly moves the mark an earlier server kept in box's record
// (paused with keepMemory false: not auto-resumed) into its paused
// session, where pauses keep it now, then drops it from the record. A
// mark that cannot be moved stays in the record for the next start,
// and is logged.
func (s *Server) moveFilesOnly(ctx context.Context, box *sandbox) {
	if err := s.m.RequireExplicitResume(box.id); err != nil {
		s.log().Error("an E2B sandbox paused with keepMemory false could not be marked so in its paused session; its data plane may resume it", "sandbox", box.id, "err", err)
		return
	}
	if err := s.save(ctx, box); err != nil {
		s.log().Warn("an E2B sandbox's record could not be updated; the next start marks its pause again", "sandbox", box.id, "err", err)
	}
}

// unrecord removes the record of a sandbox whose session is gone.
func (s *Server) unrecord(id string) {
	if s.Records == nil {
		return
	}
	if err := s.Records.DeleteSandbox(context.Background(), id); err != nil {
		s.log().Warn("removing an E2B sandbox's record failed; the next start removes it", "sandbox", id, "err", err)
	}
}

// sessionID is the session a sandbox id names: E2B's form of a clustered
// id is its host label (dashes for dots: one DNS label, so that getHost's
// <port>-<id>.<domain> is a host the router can route); a server's own
// ids are the same in both forms.
func sessionID(wire string) string {
	if id, ok := cluster.FromHostLabel(wire); ok {
		return id
	}
	return wire
}

// wireID is E2B's form of session id (see sessionID).
func wireID(id string) string {
	if label, ok := cluster.HostLabel(id, cluster.MaxHostLabel); ok {
		return label
	}
	return id
}

// others is the sandboxes of the cluster's other servers that who sees,
// as the sessions directory lists them (running or paused, with the pod
// that holds each) and their records describe them: what Sandbox.list
// shows beside this server's own. Nothing without a shared store.
func (s *Server) others(ctx context.Context, who identity.Identity) ([]sandboxJSON, error) {
	if s.Cluster == nil || s.Records == nil {
		return nil, nil
	}
	sessions, err := s.Cluster(ctx, who)
	if err != nil {
		return nil, err
	}
	mine := s.Records.ServerPod()
	live := map[string]apitype.Session{}
	for _, x := range sessions {
		if x.Pod != mine && x.State != apitype.StateEnded {
			live[x.ID] = x
		}
	}
	if len(live) == 0 {
		return nil, nil
	}
	recs, err := s.Records.Sandboxes(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []sandboxJSON
	for _, rec := range recs {
		x, ok := live[rec.ID]
		var r record
		if !ok || json.Unmarshal(rec.Info, &r) != nil || !who.Sees(r.Owner.Tenant) {
			continue
		}
		box := s.newBox(rec.ID, r)
		d := box.base()
		d.StartedAt = &box.started
		if x.State == apitype.StatePaused {
			d.State = "paused"
		}
		l := x.Limits
		cpus, mem, disk := max(l.CPUs, 0), int64(l.Memory)>>20, int64(l.Disk)>>20
		d.CPUCount, d.MemoryMB, d.DiskSizeMB = &cpus, &mem, &disk
		out = append(out, d)
	}
	return out, nil
}
