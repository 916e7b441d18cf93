package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/store"
)

// exitGuide documents airlock's exit statuses.
const exitGuide = "docs/guides/run-and-one-shots.md"

// guideExitCodes reads the guide's table of airlock's exit statuses.
func guideExitCodes(t *testing.T) map[int]string {
	t.Helper()
	b, err := os.ReadFile("../../" + exitGuide)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "Exit statuses of airlock itself")
	if !ok {
		t.Fatalf("%s has no table of exit statuses", exitGuide)
	}
	table, _, _ = strings.Cut(table, "\n#")
	rows := map[int]string{}
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+) \| (.*) \|$`).FindAllStringSubmatch(table, -1) {
		code, _ := strconv.Atoi(m[1])
		rows[code] = m[2]
	}
	if len(rows) < 5 {
		t.Fatalf("%s's exit table: %v", exitGuide, rows)
	}
	return rows
}

// hostEnv is a configuration of the test's own directories, no server
// socket, on top of env.
func hostEnv(t *testing.T, env ...string) (dir string) {
	dir = t.TempDir()
	withEnv(t, append([]string{"AIRLOCK_STATE_DIR=" + dir + "/state", "AIRLOCK_DATA_DIR=" + dir + "/data",
		"AIRLOCK_CACHE_DIR=" + dir + "/cache", "AIRLOCK_SERVER_SOCKET=off"}, env...)...)
	return dir
}

// Each row of the guide's exit table is what airlock exits with in the
// cases it names.
func TestExitCodesMatchTheGuide(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("print(1)\n"), 0o644)
	type scenario struct {
		name string
		run  func(t *testing.T, stderr io.Writer) int
	}
	scenarios := map[int][]scenario{
		64: {
			{"run --memory lots", func(t *testing.T, e io.Writer) int {
				hostEnv(t)
				return runCmd([]string{"--memory", "lots", prog}, nil, io.Discard, e)
			}},
			{"keys revoke of an unknown id", func(t *testing.T, e io.Writer) int {
				dir := hostEnv(t)
				db, err := store.OpenSQLite(dir + "/data")
				if err != nil {
					t.Fatal(err)
				}
				db.Close()
				return keysCmd([]string{"revoke", "key_000000000000"}, io.Discard, e)
			}},
			{"audit --kind of no record", func(t *testing.T, e io.Writer) int {
				hostEnv(t)
				return auditCmd([]string{"--kind", "sesion"}, io.Discard, e)
			}},
		},
		66: {
			{"run of a missing file", func(t *testing.T, e io.Writer) int {
				hostEnv(t)
				return runCmd([]string{"/nonexistent/p.py"}, nil, io.Discard, e)
			}},
			{"audit without a database", func(t *testing.T, e io.Writer) int {
				hostEnv(t)
				return auditCmd(nil, io.Discard, e)
			}},
		},
		69: {
			{"run --isolation gvisor without a server", func(t *testing.T, e io.Writer) int {
				hostEnv(t)
				return runCmd([]string{"--isolation", "gvisor", prog}, nil, io.Discard, e)
			}},
			{"an isolation the server refuses", func(t *testing.T, e io.Writer) int {
				return exitFor(e, fmt.Errorf(`%w: isolation "gvisor" is not allowed by this server`, errdefs.ErrPermission))
			}},
			{"a listen address in use, before anything starts", func(t *testing.T, e io.Writer) int {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				dir := hostEnv(t, "AIRLOCK_METRICS_LISTEN=")
				code := serveCmd([]string{"--listen", ln.Addr().String()}, e)
				for _, d := range []string{"state", "data", "cache"} {
					if _, err := os.Stat(filepath.Join(dir, d)); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s was made before the address was checked: %v", d, err)
					}
				}
				return code
			}},
			{"a metrics address in use", func(t *testing.T, e io.Writer) int {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				dir := hostEnv(t, "AIRLOCK_METRICS_LISTEN="+ln.Addr().String())
				code := serveCmd([]string{"--listen", "127.0.0.1:0"}, e)
				if _, err := os.Stat(filepath.Join(dir, "state")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the state directory was made before the address was checked: %v", err)
				}
				return code
			}},
		},
		70: {{"an internal error", func(t *testing.T, e io.Writer) int { return exitFor(e, errors.New("boom")) }}},
		73: {
			{"--out on a file", func(t *testing.T, e io.Writer) int {
				hostEnv(t)
				return runCmd([]string{"--out", prog, prog}, nil, io.Discard, e)
			}},
			{"a file not copied out", func(t *testing.T, e io.Writer) int {
				return report(&apitype.OneShotResult{Result: &apitype.Result{}}, config.DefaultLimits(), false, []string{"big.bin: too large"}, io.Discard, e)
			}},
		},
		75: {
			{"the server at capacity", func(t *testing.T, e io.Writer) int {
				return exitFor(e, fmt.Errorf("%w: 64 executions", errdefs.ErrLimit))
			}},
			{"a quota used up", func(t *testing.T, e io.Writer) int {
				return exitFor(e, &errdefs.RetryError{Err: fmt.Errorf("%w: quota", errdefs.ErrQuota)})
			}},
		},
		77: {{"a refused key", func(t *testing.T, e io.Writer) int {
			return exitFor(e, fmt.Errorf("%w: bad or missing API key", errdefs.ErrUnauthenticated))
		}}},
		78: {
			{"an unknown key", func(t *testing.T, e io.Writer) int {
				hostEnv(t, "AIRLOCK_SERVER_LISTN=x")
				return serveCmd(nil, e)
			}},
			{"a configuration the server refuses at start", func(t *testing.T, e io.Writer) int {
				return exitFor(e, &config.Error{Problems: []string{"network.max_open_connections: above the limit"}})
			}},
		},
		137: {{"a killed program", func(t *testing.T, e io.Writer) int {
			return report(&apitype.OneShotResult{Result: &apitype.Result{Killed: true, KillReason: apitype.KillMemory}}, config.DefaultLimits(), false, nil, io.Discard, e)
		}}},
	}
	guide := guideExitCodes(t)
	for code := range guide {
		if len(scenarios[code]) == 0 {
			t.Errorf("the guide's exit status %d (%s) has no case here", code, guide[code])
		}
	}
	for code, cases := range scenarios {
		if _, ok := guide[code]; !ok {
			t.Errorf("exit status %d is not in the guide's table", code)
		}
		for _, sc := range cases {
			t.Run(fmt.Sprintf("%d %s", code, sc.name), func(t *testing.T) {
				var stderr bytes.Buffer
				if got := sc.run(t, &stderr); got != code {
					t.Errorf("exit %d, want %d; stderr: %s", got, code, stderr.String())
				}
			})
		}
	}
}

// Every kind of error exits with a status of the guide's table.
func TestEveryKindHasADocumentedExitCode(t *testing.T) {
	guide := guideExitCodes(t)
	for _, k := range errdefs.Kinds() {
		if _, ok := guide[k.Exit]; !ok {
			t.Errorf("%s exits %d, which the guide's table does not list", k.Code, k.Exit)
		}
	}
	for _, code := range []int{exitUsage, exitNoInput, exitUnavailable, exitSoftware, exitCantCreate, exitConfig, exitKilled} {
		if _, ok := guide[code]; !ok {
			t.Errorf("exit status %d is not in the guide's table", code)
		}
	}
	if slices.ContainsFunc(errdefs.Kinds(), func(k errdefs.Kind) bool { return k.Exit == 0 }) {
		t.Error("a kind exits 0")
	}
}

// `airlock keys` against a database no running server uses says so on
// stderr (a note: it still does its work and exits 0); against one a
// server uses, it says nothing.
func TestKeysNotesAnUnservedDatabase(t *testing.T) {
	dir := hostEnv(t)
	var stderr bytes.Buffer
	if code := keysCmd([]string{"list"}, io.Discard, &stderr); code != 0 || !strings.Contains(stderr.String(), "note: no running airlock server uses "+dir+"/data") {
		t.Errorf("exit %d, stderr %q: want 0 and a note", code, stderr.String())
	}
	db, err := store.OpenSQLite(dir + "/data")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Serve(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := keysCmd([]string{"create", "--tenant", "team-a"}, io.Discard, &stderr); code != 0 || strings.Contains(stderr.String(), "note") {
		t.Errorf("exit %d, stderr %q: want 0 and no note", code, stderr.String())
	}
}
