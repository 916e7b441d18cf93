package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// routerRule is the chart's router rule for release "airlock"
// (deploy/helm/airlock/files/router.conf): every id a server makes must
// match it, so that the router sends its requests back here.
var routerRule = regexp.MustCompile(`^(airlock-(0|[1-9][0-9]{0,3}))\.[0-9a-z]{1,13}\.[0-9A-Za-z]{1,64}$`)

func TestNewIDs(t *testing.T) {
	var alone *Identity
	if id := alone.NewID(); !regexp.MustCompile(`^[0-9a-f]{24}$`).MatchString(id) {
		t.Errorf("a server on its own makes %q, want 24 hex digits as before", id)
	}
	i := &Identity{Pod: "airlock-12", Epoch: time.Date(2026, 11, 25, 21, 0, 0, 0, time.UTC).Unix()}
	seen := map[string]bool{}
	for n := 0; n < 1000; n++ {
		id := i.NewID()
		m := routerRule.FindStringSubmatch(id)
		if m == nil || m[1] != "airlock-12" {
			t.Fatalf("%q does not match the router's rule for its pod", id)
		}
		p, ok := Parse(id)
		if !ok || p.Pod != i.Pod || p.Epoch != i.Epoch || len(p.Random) != 24 || strings.ToLower(p.Random) != p.Random {
			t.Fatalf("Parse(%q) = %+v %v", id, p, ok)
		}
		if seen[id] {
			t.Fatalf("%q twice", id)
		}
		seen[id] = true
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"airlock-0.k2f9x1.Q7xAbc9Zt3", true},
		{"a.0.x", true},
		{"airlock-0." + strings.Repeat("z", 13) + ".x", false}, // overflows int64
		{"airlock-0.1" + strings.Repeat("0", 12) + ".x", true},
		{"airlock-0.k2f9.", false},
		{"airlock-0..Q7x", false},
		{".k2f9.Q7x", false},
		{"airlock-0.K2F9.Q7x", false},
		{"airlock-0.k2f9.Q7x.evil", false},
		{"airlock-0.k2f9.Q7x-y", false},
		{"airlock-0.k2f9.Q7x/../x", false},
		{"Airlock-0.k2f9.Q7x", false},
		{"airlock-.k2f9.Q7x", false},
		{"airlock-0.-1.Q7x", false},
		{"airlock-0.+1.Q7x", false},
		{"airlock-0.k2f9." + strings.Repeat("a", 65), false},
		{"0123456789abcdef01234567", false},
		{"", false},
	} {
		if _, ok := Parse(c.id); ok != c.ok {
			t.Errorf("Parse(%q) ok = %v, want %v", c.id, ok, c.ok)
		}
	}
}

func TestUnknown(t *testing.T) {
	i := &Identity{Pod: "airlock-1", Epoch: 1_000_000}
	ep := func(e int64) string { return strconv.FormatInt(e, 36) }
	for _, c := range []struct {
		id   string
		want error
	}{
		{"airlock-0." + ep(1_000_000) + ".abc", errdefs.ErrMisdirected},
		{"airlock-2." + ep(5) + ".abc", errdefs.ErrMisdirected},
		{"airlock-1." + ep(999_999) + ".abc", errdefs.ErrSessionLost},
		{"airlock-1.0.abc", errdefs.ErrSessionLost},
		{"airlock-1." + ep(1_000_000) + ".abc", errdefs.ErrNotFound}, // this run's, never made or long ended
		{"airlock-1." + ep(1_000_001) + ".abc", errdefs.ErrNotFound}, // a later run's: not this one's to judge
		{"0123456789abcdef01234567", errdefs.ErrNotFound},            // a plain id
		{"airlock-0.k2f9.Q7x.evil", errdefs.ErrNotFound},
		{"airlock-0", errdefs.ErrNotFound},
	} {
		err := i.Unknown(c.id)
		if !errors.Is(err, c.want) {
			t.Errorf("Unknown(%q) = %v, want %v", c.id, err, c.want)
		}
	}
	var alone *Identity
	if err := alone.Unknown("airlock-0.k2f9.abc"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("on its own: %v, want not found", err)
	}
	if err := i.Unknown("airlock-0.k2f9." + strings.Repeat("a", 64)); strings.Contains(err.Error(), strings.Repeat("a", 64)) {
		t.Errorf("the message quotes a long id whole: %v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"POD_NAME": "airlock-7", "EMPTY": ""}
	getenv := func(k string) string { return env[k] }
	now := time.Unix(1_800_000_000, 0)
	nameFile := filepath.Join(dir, "name")
	os.WriteFile(nameFile, []byte("airlock-3\n"), 0o644)
	badFile := filepath.Join(dir, "bad")
	os.WriteFile(badFile, []byte("airlock.3"), 0o644)

	if i, err := Load(config.Cluster{}, dir, getenv, now); i != nil || err != nil {
		t.Fatalf("no cluster: %v %v", i, err)
	}
	for _, c := range []struct {
		c    config.Cluster
		name string
	}{
		{config.Cluster{PodName: "airlock-0"}, "airlock-0"},
		{config.Cluster{PodNameFile: nameFile}, "airlock-3"},
		{config.Cluster{PodNameEnv: "POD_NAME"}, "airlock-7"},
	} {
		i, err := Load(c.c, t.TempDir(), getenv, now)
		if err != nil || i.Pod != c.name || i.Epoch != now.Unix() {
			t.Errorf("%+v: %+v %v", c.c, i, err)
		}
	}
	for _, c := range []config.Cluster{
		{PodNameFile: badFile},
		{PodNameFile: filepath.Join(dir, "missing")},
		{PodNameEnv: "EMPTY"},
		{PodNameEnv: "UNSET"},
	} {
		if _, err := Load(c, t.TempDir(), getenv, now); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want invalid argument", c, err)
		}
	}

	// Epochs only grow on one state directory: the same second, a clock
	// set back, then a clock ahead again.
	state := t.TempDir()
	c := config.Cluster{PodName: "airlock-0"}
	var last int64
	for n, at := range []time.Time{now, now, now.Add(-time.Hour), now.Add(time.Hour)} {
		i, err := Load(c, state, getenv, at)
		if err != nil {
			t.Fatal(err)
		}
		if i.Epoch <= last {
			t.Errorf("boot %d at %v: epoch %d after %d", n, at, i.Epoch, last)
		}
		last = i.Epoch
	}
	if last != now.Add(time.Hour).Unix() {
		t.Errorf("the clock ahead gives %d, want %d", last, now.Add(time.Hour).Unix())
	}
}

// FuzzParse: whatever a client sends as an id, Parse either refuses it or
// returns parts that make exactly that id, which the router's rule would
// match with a short pod name.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"airlock-0.k2f9x1.Q7xAbc9Zt3", "a.0.x", "airlock-0..x", "x.y.z.w", "airlock-0.zzzzzzzzzzzzz.a", "\x00.\x00.\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		p, ok := Parse(id)
		if !ok {
			return
		}
		if back := p.Pod + "." + strconv.FormatInt(p.Epoch, 36) + "." + p.Random; back != id && !strings.HasPrefix(strings.Split(id, ".")[1], "0") {
			t.Fatalf("%q parsed as %+v, which makes %q", id, p, back)
		}
		if !regexp.MustCompile(`^[a-z0-9-]{1,63}\.[0-9a-z]{1,13}\.[0-9A-Za-z]{1,64}$`).MatchString(id) {
			t.Fatalf("%q accepted", id)
		}
	})
}

// Every id a server makes has a host label, one lower-case DNS label
// that gives the id back; labels of other forms, and ids an upper-case
// letter would lose in a hostname, give nothing.
func TestHostLabel(t *testing.T) {
	var alone *Identity
	ids := []string{alone.NewID()}
	for _, pod := range []string{"airlock-0", "airlock-9999", "a", "my-long-release-name-1"} {
		i := &Identity{Pod: pod, Epoch: time.Date(2026, 11, 25, 21, 0, 0, 0, time.UTC).Unix()}
		ids = append(ids, i.NewID())
	}
	dnsLabel := regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	for _, id := range ids {
		label, ok := HostLabel(id, MaxHostLabel)
		if !ok || !dnsLabel.MatchString(label) || len(label) > MaxHostLabel {
			t.Fatalf("HostLabel(%q) = %q %v", id, label, ok)
		}
		if back, ok := FromHostLabel(label); !ok || back != id {
			t.Fatalf("FromHostLabel(%q) = %q %v, want %q", label, back, ok, id)
		}
	}
	if _, ok := HostLabel("airlock-0.k2f9x1.Q7xAbc9Zt3", MaxHostLabel); ok {
		t.Error("an id with upper case has a host label")
	}
	long := &Identity{Pod: strings.Repeat("p", 40), Epoch: 1}
	if _, ok := HostLabel(long.NewID(), MaxHostLabel); ok {
		t.Error("a label longer than 63 characters")
	}
	for _, label := range []string{"", "airlock-0", "airlock-0--abc", "-k2f9-abc", "airlock-0-K2F9-abc",
		"airlock-0-k2f9-ABC", "airlock-0-0k2f9-abc", "airlock-0-k2f9-a.b", "0123456789abcdef0123456", "0123456789ABCDEF01234567"} {
		if id, ok := FromHostLabel(label); ok {
			t.Errorf("FromHostLabel(%q) = %q", label, id)
		}
	}
}

func FuzzHostLabel(f *testing.F) {
	f.Add("airlock-0-k2f9x1-abc")
	f.Add("0123456789abcdef01234567")
	f.Fuzz(func(t *testing.T, label string) {
		id, ok := FromHostLabel(label)
		if !ok {
			return
		}
		if back, ok := HostLabel(id, len(label)); !ok || back != label {
			t.Fatalf("FromHostLabel(%q) = %q, whose label is %q %v", label, id, back, ok)
		}
	})
}
