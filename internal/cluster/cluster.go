// Package cluster owns a server's place among others — pods of a
// StatefulSet behind a router, each a whole airlock server: its name
// (from the configuration, a file such as Kubernetes' downward API, or an
// environment variable), its boot epoch, the session ids that carry both
// (<name>.<epoch base 36>.<24 random base 36 characters>) and their host
// labels (the one DNS label a session's ports are reached under, see
// HostLabel), and what an id
// that names no session of this server means: another server's
// (misdirected, 421), this server's before it restarted (lost, 410), or
// nothing (404).
//
// It must never reach the network or another server: there is no
// membership, shared store or controller; routing is the router's, by
// the name in the id. And it must never let an id choose more than which
// answer it gets.
package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// Identity is a server's name and boot epoch. The nil *Identity is a
// server on its own: plain random ids, and an unknown id is not found.
type Identity struct {
	// Pod is the server's name, a DNS label.
	Pod string
	// Epoch is when this run of the server began, in seconds since 1970,
	// and always later than any earlier run's on the same state
	// directory.
	Epoch int64
}

// epochFile, in the state directory, remembers the last boot's epoch.
const epochFile = "boot-epoch"

// Load returns the server's identity, nil when the configuration names no
// cluster. getenv reads the environment (os.Getenv); the epoch is now,
// or one more than the last run's when the clock says otherwise, and is
// recorded in stateDir, which the caller holds (the server's lock).
func Load(c config.Cluster, stateDir string, getenv func(string) string, now time.Time) (*Identity, error) {
	if !c.Enabled() {
		return nil, nil
	}
	name, err := PodName(c, getenv)
	if err != nil {
		return nil, fmt.Errorf("%w: cluster: %v", errdefs.ErrInvalidArgument, err)
	}
	epoch, err := bootEpoch(stateDir, now)
	if err != nil {
		return nil, fmt.Errorf("%w: cluster: boot epoch: %v", errdefs.ErrUnavailable, err)
	}
	return &Identity{Pod: name, Epoch: epoch}, nil
}

// PodName reads the server's name from where the configuration says.
func PodName(c config.Cluster, getenv func(string) string) (string, error) {
	name, from := c.PodName, "cluster.pod_name"
	switch {
	case c.PodNameFile != "":
		b, err := os.ReadFile(c.PodNameFile)
		if err != nil {
			return "", fmt.Errorf("cluster.pod_name_file: %v", err)
		}
		name, from = strings.TrimSpace(string(b)), c.PodNameFile
	case c.PodNameEnv != "":
		name, from = getenv(c.PodNameEnv), "$"+c.PodNameEnv
	}
	if err := config.ValidPodName(name); err != nil {
		return "", fmt.Errorf("the server's name from %s: %v", from, err)
	}
	return name, nil
}

// bootEpoch is max(now, last+1), recorded before it is used: two runs
// within a second, or a clock set back, still get increasing epochs as
// long as the state directory lasts; beyond it (a new pod, a rebooted
// host) the clock alone orders runs.
func bootEpoch(stateDir string, now time.Time) (int64, error) {
	path := filepath.Join(stateDir, epochFile)
	epoch := now.Unix()
	if b, err := os.ReadFile(path); err == nil {
		if last, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && last >= epoch {
			epoch = last + 1
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(epoch, 10)+"\n"), 0o600); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return 0, err
	}
	return epoch, nil
}

// Random part of a clustered id: 24 base 36 characters, 124 bits, in
// lower case: a hostname is case-insensitive (browsers lower-case it), so
// only a lower-case id survives in a session's host label. Parse takes
// upper case too (ids of earlier versions; the router's rule).
const (
	randomLen = 24
	alphabet  = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	lower36   = "0123456789abcdefghijklmnopqrstuvwxyz"
)

// NewID returns a new session id: 24 hex digits on its own, else
// <pod>.<epoch base 36>.<random>.
func (i *Identity) NewID() string {
	if i == nil {
		var b [12]byte
		rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}
	return i.Pod + "." + strconv.FormatInt(i.Epoch, 36) + "." + randomString(randomLen)
}

func randomString(n int) string {
	out := make([]byte, 0, n)
	var buf [32]byte
	for len(out) < n {
		rand.Read(buf[:])
		for _, c := range buf {
			// 252 = 7*36: no character is likelier than another.
			if c < 252 && len(out) < n {
				out = append(out, lower36[c%36])
			}
		}
	}
	return string(out)
}

// ID is a parsed clustered session id.
type ID struct {
	Pod    string
	Epoch  int64
	Random string
}

// Parse reads a clustered session id: a DNS label, an epoch of 1 to 13
// base 36 digits (lower case) and 1 to 64 letters and digits, parted by
// single dots. These are the ids the chart's router sends to a pod.
func Parse(id string) (ID, bool) {
	pod, rest, ok := strings.Cut(id, ".")
	if !ok || config.ValidPodName(pod) != nil {
		return ID{}, false
	}
	ep, random, ok := strings.Cut(rest, ".")
	if !ok || len(ep) < 1 || len(ep) > 13 || len(random) < 1 || len(random) > 64 {
		return ID{}, false
	}
	for i := 0; i < len(ep); i++ {
		if c := ep[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') {
			return ID{}, false
		}
	}
	for i := 0; i < len(random); i++ {
		if strings.IndexByte(alphabet, random[i]) < 0 {
			return ID{}, false
		}
	}
	epoch, err := strconv.ParseInt(ep, 36, 64)
	if err != nil {
		return ID{}, false
	}
	return ID{Pod: pod, Epoch: epoch, Random: random}, true
}

// MaxHostLabel is the longest DNS label (RFC 1035).
const MaxHostLabel = 63

// HostLabel is the form of session id that fits in one DNS label, lower
// case, for hostnames such as <port>-<label>.<ports.domain>: a server's
// own id (24 hex digits) as it is, a clustered one with its dots made
// dashes (<pod>-<epoch>-<random>: the pod name keeps its own dashes, the
// other two parts have none, so the last two dashes part them). Every id
// this package makes has one unless the pod's name is too long for the
// whole to fit in max characters (false); FromHostLabel undoes it.
func HostLabel(id string, max int) (string, bool) {
	label := id
	if !standalone(id) {
		p, ok := Parse(id)
		if !ok || strings.ToLower(p.Random) != p.Random {
			return "", false
		}
		label = p.Pod + "-" + strconv.FormatInt(p.Epoch, 36) + "-" + p.Random
	}
	return label, len(label) <= max
}

// FromHostLabel is the session id whose HostLabel is label; false if it
// names none (it is not in the form HostLabel gives).
func FromHostLabel(label string) (string, bool) {
	if standalone(label) {
		return label, true
	}
	rest, random, ok := cutLast(label, '-')
	if !ok {
		return "", false
	}
	pod, epoch, ok := cutLast(rest, '-')
	if !ok {
		return "", false
	}
	id := pod + "." + epoch + "." + random
	p, ok := Parse(id)
	if !ok || strings.ToLower(random) != random || strconv.FormatInt(p.Epoch, 36) != epoch {
		return "", false
	}
	return id, true
}

func cutLast(s string, sep byte) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, sep)
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// standalone reports whether id is a server-on-its-own id: 24 lower-case
// hex digits.
func standalone(id string) bool {
	if len(id) != 24 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Unknown is the error for an id that names no live or recently ended
// session of this server: ErrMisdirected when it names another server,
// ErrSessionLost when it names an earlier run of this one, else
// ErrNotFound.
func (i *Identity) Unknown(id string) error {
	notFound := fmt.Errorf("%w: no session %q", errdefs.ErrNotFound, truncate(id))
	if i == nil {
		return notFound
	}
	p, ok := Parse(id)
	switch {
	case !ok:
		return notFound
	case p.Pod != i.Pod:
		return fmt.Errorf("%w: session %q belongs to server %s, not to this one (%s): send its requests through the router, or to that server", errdefs.ErrMisdirected, truncate(id), p.Pod, i.Pod)
	case p.Epoch < i.Epoch:
		return fmt.Errorf("%w: session %q ended when server %s restarted; create a new session", errdefs.ErrSessionLost, truncate(id), i.Pod)
	}
	return notFound
}

func truncate(id string) string {
	if len(id) > 64 {
		return id[:64] + "..."
	}
	return id
}
