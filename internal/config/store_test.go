package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The store section: sqlite by default; postgres needs a DSN, read from
// the environment or a file like any secret, masked when printed; bad
// values name their key.
func TestStoreConfig(t *testing.T) {
	if c := Default(); c.Store.Driver != StoreSQLite || c.Store.Shared() || c.Validate() != nil {
		t.Fatalf("default store %+v", c.Store)
	}
	dir := t.TempDir()
	dsnFile := filepath.Join(dir, "dsn")
	os.WriteFile(dsnFile, []byte("postgres://airlock:pw@db:5432/airlock\n"), 0o600)
	for name, env := range map[string][]string{
		"env":  {"AIRLOCK_STORE_DRIVER=postgres", "AIRLOCK_STORE_DSN=postgres://airlock:pw@db:5432/airlock"},
		"file": {"AIRLOCK_STORE_DRIVER=postgres", "AIRLOCK_STORE_DSN_FILE=" + dsnFile},
	} {
		c, err := LoadEnv("", env)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !c.Store.Shared() || c.Store.DSN != "postgres://airlock:pw@db:5432/airlock" {
			t.Errorf("%s: store %+v", name, c.Store)
		}
		if m := c.Masked(); m.Store.DSN != "***" {
			t.Errorf("%s: the DSN is not masked: %q", name, m.Store.DSN)
		}
	}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"AIRLOCK_STORE_DRIVER=mysql"}, "store.driver"},
		{[]string{"AIRLOCK_STORE_DRIVER=postgres"}, "store.dsn"},
		{[]string{"AIRLOCK_STORE_DSN=postgres://x"}, "store.dsn is for the postgres driver"},
		{[]string{"AIRLOCK_STORE_DRIVER=postgres", "AIRLOCK_STORE_DSN=postgres://x", "AIRLOCK_STORE_DSN_FILE=" + dsnFile}, "not both"},
		{[]string{"AIRLOCK_STORE_DRIVER=postgres", "AIRLOCK_STORE_DSN=postgres://x", "AIRLOCK_STORE_TIMEOUT=1ms"}, "store.timeout"},
		{[]string{"AIRLOCK_STORE_LEASE_TIMEOUT=1s"}, "store.lease_timeout"},
		{[]string{"AIRLOCK_STORE_MAX_CONNS=1"}, "store.max_conns"},
	} {
		if _, err := LoadEnv("", c.env); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %q", c.env, err, c.want)
		}
	}
}
