package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Every key has a variable, and each kind of value reads from one.
func TestEnvOverrides(t *testing.T) {
	names := EnvNames()
	for _, want := range []string{"AIRLOCK_VERSION", "AIRLOCK_DATA_DIR", "AIRLOCK_SERVER_LISTEN", "AIRLOCK_SERVER_TOKEN", "AIRLOCK_SERVER_TOKEN_FILE",
		"AIRLOCK_SERVER_MAX_SESSIONS", "AIRLOCK_DEFAULTS_MEMORY", "AIRLOCK_MAX_CPUS", "AIRLOCK_POOL_SIZE", "AIRLOCK_QUOTAS",
		"AIRLOCK_QUOTAS_MAX_LIMITS_MEMORY", "AIRLOCK_AUDIT_CODE", "AIRLOCK_RUNTIMES_PYTHON_PACKAGES", "AIRLOCK_PROTECTIONS_SECCOMP", "AIRLOCK_MCP_ENABLED"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("no variable %s", want)
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "c.json")
	os.WriteFile(file, []byte(`{"version": 1, "server": {"listen": "127.0.0.1:9000", "max_sessions": 5}, "audit": {"code": "full"}}`), 0o600)
	c, err := LoadEnv(file, []string{
		"AIRLOCK_SERVER_MAX_SESSIONS=7",                                  // a number, over the file
		"AIRLOCK_SERVER_LISTEN=127.0.0.2:9001",                           // text
		"AIRLOCK_DEFAULTS_MEMORY=256M",                                   // a size
		"AIRLOCK_DEFAULTS_TIMEOUT=10s",                                   // a duration
		"AIRLOCK_MCP_ENABLED=false",                                      // a boolean
		"AIRLOCK_POOL_SIZE={\"python\": 3}",                              // an object
		"AIRLOCK_RUNTIMES_PYTHON_PACKAGES=numpy,pandas",                  // a comma list
		"AIRLOCK_QUOTAS={\"max_sessions\": 4}",                           // a whole section
		"AIRLOCK_QUOTAS_EXECUTIONS_PER_MINUTE=60",                        // and a key in it
		"AIRLOCK_CONFIG=/not/a/key", "AIRLOCK_CPUPROFILE=x", "PATH=/bin", // not keys
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.MaxSessions != 7 || c.Server.Listen != "127.0.0.2:9001" || c.Defaults.Memory != 256<<20 || c.Defaults.Timeout.D() != 10*time.Second ||
		c.MCP.Enabled || c.Pool.Size["python"] != 3 || len(c.Pool.Size) != 1 || strings.Join(c.Runtimes.PythonPackages, ",") != "numpy,pandas" ||
		c.Quotas.MaxSessions != 4 || c.Quotas.ExecutionsPerMinute != 60 || c.Audit.Code != "full" {
		t.Errorf("config %+v", c)
	}
	for _, bad := range []string{"AIRLOCK_SERVER_MAX_SESSIONS=many", "AIRLOCK_DEFAULTS_MEMORY=lots", "AIRLOCK_QUOTAS={\"nope\": 1}", "AIRLOCK_AUDIT_CODE=most", "AIRLOCK_VERSION=2"} {
		if _, err := LoadEnv("", []string{bad}); err == nil {
			t.Errorf("%s accepted", bad)
		} else if !strings.Contains(err.Error(), strings.SplitN(bad, "=", 2)[0][len("AIRLOCK_"):][:4]) && !strings.Contains(err.Error(), "version") && !strings.Contains(err.Error(), "audit.code") {
			t.Errorf("%s: the error does not name it: %v", bad, err)
		}
	}
}

// A secret's _file variant reads it from a file (a mounted Kubernetes
// Secret), in the file or the environment; masked when printed.
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("s3cret-from-file\n"), 0o600)
	cfgFile := filepath.Join(dir, "c.json")
	os.WriteFile(cfgFile, []byte(`{"server": {"token_file": "`+tok+`"}}`), 0o600)
	for name, load := range map[string]func() (Config, error){
		"file": func() (Config, error) { return LoadEnv(cfgFile, nil) },
		"env":  func() (Config, error) { return LoadEnv("", []string{"AIRLOCK_SERVER_TOKEN_FILE=" + tok}) },
	} {
		c, err := load()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Server.Token != "s3cret-from-file" {
			t.Errorf("%s: token %q", name, c.Server.Token)
		}
		if m := c.Masked(); m.Server.Token != "***" || c.Server.Token != "s3cret-from-file" {
			t.Errorf("%s: masked %q (original %q)", name, m.Server.Token, c.Server.Token)
		}
	}
	if _, err := LoadEnv(cfgFile, []string{"AIRLOCK_SERVER_TOKEN=also"}); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("token and token_file: %v", err)
	}
	if _, err := LoadEnv("", []string{"AIRLOCK_SERVER_TOKEN_FILE=" + filepath.Join(dir, "missing")}); err == nil {
		t.Error("a missing token file was accepted")
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := LoadEnv("", []string{"AIRLOCK_SERVER_TOKEN_FILE=" + empty}); err == nil {
		t.Error("an empty token file was accepted")
	}
}

// server.auth "none" is for loopback only; version 1 (or unset) only.
func TestAuthAndVersion(t *testing.T) {
	for _, c := range []struct {
		listen, auth string
		ok           bool
	}{
		{"127.0.0.1:8080", "none", true},
		{"[::1]:8080", "none", true},
		{"localhost:8080", "none", true},
		{"0.0.0.0:8080", "none", false},
		{":8080", "none", false},
		{"10.0.0.1:8080", "none", false},
		{"0.0.0.0:8080", "keys", true},
		{"127.0.0.1:8080", "basic", false},
	} {
		cfg := Default()
		cfg.Server.Listen, cfg.Server.Auth = c.listen, c.auth
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("%s auth %s: %v", c.listen, c.auth, err)
		}
	}
	for v, ok := range map[int]bool{0: true, 1: true, 2: false} {
		cfg := Default()
		cfg.Version = v
		if err := cfg.Validate(); (err == nil) != ok {
			t.Errorf("version %d: %v", v, err)
		}
	}
}

// A variable listed as naming no key must name none: set, it would
// otherwise be read as that key's value (AIRLOCK_TOOLS, scripts/test.sh's
// tools directory, was the tools key's variable, so with it set every
// airlock command refused its configuration), and it must be accepted
// alone.
func TestOtherEnvNamesNoKey(t *testing.T) {
	keys := envKeys()
	for name := range OtherEnv {
		if path, ok := keys[name]; ok {
			t.Errorf("%s is listed as naming no key, but it is the variable of %s", name, strings.Join(path, "."))
			continue
		}
		c := Default()
		if err := c.ApplyEnv([]string{name + "=/some/value"}); err != nil {
			t.Errorf("%s set: %v", name, err)
		}
	}
}
