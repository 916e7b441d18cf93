package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/store"
	"airlock/internal/store/pgtest"
)

// sharedStore is the configuration of a server of a cluster whose store
// is the PostgreSQL at dsn (read from a file, as a mounted Secret).
func sharedStore(t *testing.T, dsn, pod string) map[string]any {
	t.Helper()
	f := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(f, []byte(dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]any{
		"server":  map[string]any{"auth": "keys"},
		"cluster": map[string]any{"pod_name": pod},
		"store":   map[string]any{"driver": "postgres", "dsn_file": f, "lease_timeout": "3s", "timeout": "2s"},
		"pool":    clusterPool,
	}
}

// sharedCluster starts n servers (airlock-0, airlock-1, ...) sharing a
// new database of a PostgreSQL of its own, each configuration changed
// by tweak (nil: none).
func sharedCluster(t *testing.T, n int, tweak func(cfg map[string]any)) (*pgtest.Server, []*server) {
	t.Helper()
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	var servers []*server
	for i := 0; i < n; i++ {
		cfg := sharedStore(t, dsn, fmt.Sprint("airlock-", i))
		if tweak != nil {
			tweak(cfg)
		}
		servers = append(servers, startServer(t, cfg))
	}
	return pg, servers
}

// withPersistence turns persistence on (pauses, forks).
func withPersistence(cfg map[string]any) { cfg["persistence"] = map[string]any{"enabled": true} }

// Three servers sharing one PostgreSQL are one cluster: a key made with
// `airlock keys` on one host works on all at once; a tenant's quotas hold
// across them (20 creations at once against max_sessions 3, spread over
// the three, make exactly 3; executions in flight likewise); every
// server lists the tenant's sessions of all, with their pods; the audit
// log is one (GET /v1/audit on any server, `airlock audit`); a server
// killed with -9 has its sessions marked ended, and its quota freed,
// within store.lease_timeout; a revocation holds on every server within
// a second.
func TestSharedStoreCluster(t *testing.T) {
	pg, servers := sharedCluster(t, 3, nil)
	s0, s1, s2 := servers[0], servers[1], servers[2]
	ctx := context.Background()
	for _, s := range servers {
		if strings.Contains(s.stderr.String(), pg.Password()) {
			t.Fatalf("the server logged the database's password")
		}
	}

	key := s0.newKey("team-a", "--max-sessions", "3", "--max-concurrent-executions", "2")
	for i, s := range servers {
		if _, err := s.as(key).Sessions(ctx); err != nil {
			t.Fatalf("the key made on airlock-0's host, on airlock-%d: %v", i, err)
		}
	}

	// Quotas across servers: exactly 3 of 20 at once.
	var mu sync.Mutex
	var ids []string
	refused := 0
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < 20; i++ {
		wg.Go(func() {
			<-start
			info, err := servers[i%3].as(key).CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ids = append(ids, info.ID)
				return
			}
			if e := apiError(err); e != nil && e.Status == 429 && e.Code == "quota_exceeded" {
				refused++
				return
			}
			t.Errorf("creation %d: %v", i, err)
		})
	}
	close(start)
	wg.Wait()
	if len(ids) != 3 || refused != 17 {
		t.Fatalf("%d created, %d refused, of 20 against max_sessions 3 over 3 servers", len(ids), refused)
	}

	// Ended on their servers, their places are free at once: one
	// session on each server now.
	srv := map[string]*server{"airlock-0": s0, "airlock-1": s1, "airlock-2": s2}
	for _, id := range ids {
		if err := srv[id[:strings.IndexByte(id, '.')]].as(key).DeleteSession(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	pods := map[string]string{} // session -> pod
	byPod := map[string]string{}
	for i, s := range servers {
		info, err := s.as(key).CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
		if err != nil {
			t.Fatalf("a session on airlock-%d after the deletions: %v", i, err)
		}
		pods[info.ID], byPod[fmt.Sprint("airlock-", i)] = fmt.Sprint("airlock-", i), info.ID
	}

	// Every server lists the tenant's three, each with its pod.
	for i, s := range servers {
		l, err := s.as(key).Sessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(l) != 3 {
			t.Fatalf("airlock-%d lists %d sessions: %+v", i, len(l), l)
		}
		for _, sess := range l {
			if pods[sess.ID] == "" || sess.Pod != pods[sess.ID] || sess.State == apitype.StateEnded || sess.Tenant != "team-a" {
				t.Errorf("airlock-%d lists %+v", i, sess)
			}
		}
	}

	// Executions in flight across servers: two run (waited for as
	// busy), a third on another server is refused, then admitted once
	// one ends.
	order := []string{"airlock-0", "airlock-1", "airlock-2"}
	done := make(chan error, 2)
	for _, pod := range order[:2] {
		go func() {
			_, err := srv[pod].as(key).Execute(ctx, byPod[pod], apitype.ExecuteRequest{Code: "import time\nfor _ in range(600): time.sleep(0.1)"}, nil)
			done <- err
		}()
		waitBusy(t, srv[pod].as(key), byPod[pod])
	}
	third := order[2]
	_, err := srv[third].as(key).Execute(ctx, byPod[third], apitype.ExecuteRequest{Code: "1"}, nil)
	wantError(t, "a third execution in flight, on another server", err, 429, "quota_exceeded")
	for _, pod := range order[:2] {
		srv[pod].as(key).Interrupt(ctx, byPod[pod])
	}
	for range 2 {
		<-done
	}
	if _, err := srv[third].as(key).Execute(ctx, byPod[third], apitype.ExecuteRequest{Code: "1"}, nil); err != nil {
		t.Fatalf("after the two ended: %v", err)
	}

	// One audit log: any server, and `airlock audit`, see every server's
	// creations.
	recs := s1.waitAudit(key, url.Values{"kind": {"session.create"}}, 6)
	seen := map[string]bool{}
	for _, r := range recs {
		seen[r.Session[:strings.IndexByte(r.Session, '.')]] = true
	}
	if len(seen) != 3 {
		t.Errorf("GET /v1/audit on airlock-1 has creations of %v, want all three pods", seen)
	}
	out, err := s2.airlockCLI("audit", "--json", "--tenant", "team-a", "--kind", "session.create")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, `"kind":"session.create"`); n != 6 {
		t.Errorf("airlock audit lists %d creations:\n%s", n, out)
	}

	// kill -9 airlock-2: its session is marked ended (server_lost) on
	// the others within lease_timeout, and its place in the quota is
	// free.
	lost := byPod["airlock-2"]
	if err := s2.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s2.done
	killed := time.Now()
	for {
		l, err := s0.as(key).Sessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ended := false
		for _, sess := range l {
			ended = ended || sess.ID == lost && sess.State == apitype.StateEnded && sess.EndReason == "server_lost"
		}
		if ended {
			break
		}
		// (the others notice at their next heartbeats, which a loaded
		// host delays: a session never marked stays so)
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("airlock-2's session is not marked ended %s after its kill (lease_timeout 3s): %+v", time.Since(killed), l)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("airlock-2's session marked ended %s after kill -9 (lease_timeout 3s)", time.Since(killed).Round(time.Millisecond))
	if _, err := s0.as(key).CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"}); err != nil {
		t.Fatalf("a session in the dead server's place: %v", err)
	}
	// The killed server starts again on its state (sweeping what it
	// left); its old session is lost there.
	s2b := startServerNamed(t, s2.name, s2.cfg)
	_, err = s2b.as(key).Session(ctx, lost)
	wantError(t, "the killed server's session after its restart", err, 410, "session_lost")

	// Revocation everywhere within a second (KeyTTL), waited for.
	id := s0.keyID("team-a")
	if _, err := s1.airlockCLI("keys", "revoke", id); err != nil {
		t.Fatal(err)
	}
	// What a server cached it read before the revocation: a request that
	// begins KeyTTL (1 s) after it must be refused, however slow the host.
	revoked := time.Now()
	for _, s := range []*server{s0, s1, s2b} {
		for {
			late := time.Since(revoked) >= time.Second
			_, err := s.as(key).Sessions(ctx)
			if e := apiError(err); e != nil && e.Status == 401 {
				break
			}
			if late {
				t.Fatalf("the revoked key still works on %s %s after the revocation: %v", s.name, time.Since(revoked), err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Logf("revoked on every server within %s", time.Since(revoked).Round(time.Millisecond))
}

// A client's change of a session is listed by every server of a cluster
// as soon as the client is answered, never a heartbeat later: deleted
// (live or paused), paused, resumed (by auto_resume too). The shared
// store's cluster test once listed a session deleted a moment before as
// idle on another server (its end was written in the background).
func TestSharedStoreListsChangesAtOnce(t *testing.T) {
	_, servers := sharedCluster(t, 2, withPersistence)
	s0, s1 := servers[0], servers[1]
	ctx := context.Background()
	key := s0.newKey("team-l")
	c := s1.as(key)
	// check lists once on airlock-0 (never waiting) and wants id's state
	// there ("": not listed).
	check := func(what, id, want string) {
		t.Helper()
		l, err := s0.as(key).Sessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, s := range l {
			if s.ID == id {
				got = s.State
			}
		}
		if got != want {
			t.Errorf("%s on airlock-1: airlock-0 lists it %q, want %q", what, got, want)
		}
	}
	do := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for range 3 {
		a, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", AutoResume: true})
		do("create", err)
		check("created", a.ID, apitype.StateIdle)
		_, err = c.PauseSession(ctx, a.ID)
		do("pause", err)
		check("paused", a.ID, apitype.StatePaused)
		_, err = c.ResumeSession(ctx, a.ID)
		do("resume", err)
		check("resumed", a.ID, apitype.StateIdle)
		_, err = c.PauseSession(ctx, a.ID)
		do("pause", err)
		_, err = c.Execute(ctx, a.ID, apitype.ExecuteRequest{Code: "1"}, nil)
		do("an execution resuming it", err)
		check("resumed by auto_resume", a.ID, apitype.StateIdle)
		do("delete", c.DeleteSession(ctx, a.ID))
		check("deleted", a.ID, "")

		b, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
		do("create", err)
		_, err = c.PauseSession(ctx, b.ID)
		do("pause", err)
		do("delete", c.DeleteSession(ctx, b.ID))
		check("deleted while paused", b.ID, "")
	}
}

// waitBusy waits until the session runs an execution.
func waitBusy(t *testing.T, c *client.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := c.Session(context.Background(), id)
		if err == nil && s.State == apitype.StateBusy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s never busy: %+v %v", id, s, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A store that cannot be reached at start stops the server before it
// serves, saying where (never the password), and `airlock doctor` fails
// on it; one lost mid-run answers new work with 503 while what runs
// finishes; back, it serves again.
func TestSharedStoreFaults(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)

	bad := strings.Replace(dsn, fmt.Sprint(pg.Port()), "1", 1)
	name, cfg := serverConfig(sharedStore(t, bad, "airlock-0"))
	path := filepath.Join(t.TempDir(), "config.json")
	b, _ := json.Marshal(cfg)
	os.WriteFile(path, b, 0o600)
	defer os.RemoveAll("/run/" + name)
	out, err := exec.Command(airlockBinary(t), "serve", "--config", path).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 69 || !strings.Contains(string(out), "cannot reach the store") || !strings.Contains(string(out), "127.0.0.1:1") || strings.Contains(string(out), pg.Password()) {
		t.Errorf("serve with an unreachable store: %v\n%s", err, out)
	}
	out, err = exec.Command(airlockBinary(t), "doctor", "--json", "--config", path).Output()
	if !errors.As(err, &ee) || !strings.Contains(string(out), `"name":"store","status":"FAIL"`) || strings.Contains(string(out), pg.Password()) {
		t.Errorf("doctor with an unreachable store: %v\n%s", err, out)
	}

	s := startServer(t, sharedStore(t, dsn, "airlock-0"))
	ctx := context.Background()
	key := s.newKey("team-a", "--max-sessions", "5")
	c := s.as(key)
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	// An execution runs while the database goes; it finishes.
	res := make(chan error, 1)
	go func() {
		r, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: "import time\nfor _ in range(30): time.sleep(0.1)\nprint('done')"}, nil)
		if err == nil && !strings.Contains(r.Stdout, "done") {
			err = fmt.Errorf("result %+v", r)
		}
		res <- err
	}()
	waitBusy(t, c, sess.ID)
	pg.Kill()
	if err := <-res; err != nil {
		t.Errorf("the execution running when the store went: %v", err)
	}
	// New work is refused with 503, waited for (the key cache may hold a
	// second).
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
		if e := apiError(err); e != nil && e.Status == 503 {
			if strings.Contains(e.Message, "127.0.0.1") || strings.Contains(e.Message, pg.Password()) {
				t.Errorf("the 503 names the database: %s", e.Message)
			}
			break
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("a creation with the store gone: %v, want 503", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		r, err := s.c.Ready(ctx)
		if err == nil && !r.Ready && strings.Contains(strings.Join(r.Reasons, "; "), "store") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz with the store gone: %+v %v", r, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		_, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store back, a creation: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The store scenario of `airlock bench` runs (smoke: tiny counts) on a
// real PostgreSQL: creations and warm executions side by side with
// SQLite, every figure positive.
func TestBenchStoreSmoke(t *testing.T) {
	pg := pgtest.Start(t)
	f := filepath.Join(t.TempDir(), "dsn")
	os.WriteFile(f, []byte(pg.NewDatabase(t)+"\n"), 0o600)
	r, printed := benchSmoke(t, "--only", "store", "--store-dsn-file", f)
	if len(r.Errors) > 0 || len(r.Rows) != 6 {
		t.Fatalf("errors %v, rows %+v", r.Errors, r.Rows)
	}
	for _, row := range r.Rows {
		if row.Value <= 0 || !strings.Contains(row.Scenario, "store") {
			t.Errorf("%s: %v", row.Scenario, row.Value)
		}
	}
	if strings.Contains(printed, pg.Password()) {
		t.Error("the bench printed the database's password")
	}
}

// On one machine (SQLite) a session's creation never waits on the store's
// disk: with the sessions directory's database locked by another writer
// (as a full or stalled disk would hold it), creations still succeed and
// the server lists them (from memory); the directory catches up after.
func TestSQLiteDirectoryOffCreationPath(t *testing.T) {
	s := keysServer(t, nil)
	c := s.as(s.newKey("team-d"))
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(s.cfg["data_dir"].(string), store.DirectoryFileName)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lock, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		info, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
		if err != nil {
			lock.ExecContext(ctx, "ROLLBACK")
			t.Fatalf("a creation with the directory's database locked: %v", err)
		}
		ids = append(ids, info.ID)
	}
	list, err := c.Sessions(ctx)
	if err != nil || len(list) != len(ids) {
		t.Errorf("listed %d sessions (%v), want %d", len(list), err, len(ids))
	}
	if _, err := lock.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := c.DeleteSession(ctx, id); err != nil {
			t.Error(err)
		}
	}
}

// Paused sessions in a cluster's directory (two servers on one
// PostgreSQL, persistence on): a session paused on airlock-1 is listed
// paused, on airlock-1, by airlock-0; SIGTERM pauses airlock-1's live
// session and both stay listed paused while it is down; one SIGTERM
// cannot pause (over persistence.max_image_bytes) keeps its recovery
// point: not listed while airlock-1 is down, listed paused (recovered)
// on airlock-1 once it is back (issue #21); kill -9 ends a live session
// (server_lost) and keeps the paused ones paused; airlock-1 started
// again on its volume holds them (listed once), the live ones recovered
// from their points and listed paused on airlock-1 by airlock-0 too
// (issue #21), resumes one, and a paused session deleted there leaves
// the directory.
func TestSharedStorePaused(t *testing.T) {
	_, servers := sharedCluster(t, 2, func(cfg map[string]any) {
		withPersistence(cfg)
		cfg["persistence"].(map[string]any)["max_image_bytes"] = "1M"
	})
	s0, s1 := servers[0], servers[1]
	ctx := context.Background()
	key := s0.newKey("team-p")
	create := func(s *server) string {
		t.Helper()
		info, err := s.as(key).CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	// seen waits until airlock-0 lists the sessions as want says (state,
	// or "" for not listed); it fails after 30 s (lease_timeout is 3 s:
	// a loaded host may take a few leases to get there).
	seen := func(what string, want map[string]string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			l, err := s0.as(key).Sessions(ctx)
			got := map[string]string{}
			count := map[string]int{}
			for _, s := range l {
				got[s.ID] = s.State
				if s.State == apitype.StateEnded {
					got[s.ID] += ":" + s.EndReason
				}
				if s.State == apitype.StatePaused && s.Pod != "airlock-1" {
					got[s.ID] += "@" + s.Pod
				}
				count[s.ID]++
			}
			ok := err == nil
			for id, st := range want {
				ok = ok && got[id] == st && count[id] <= 1
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: airlock-0 lists %v (%v), want %v", what, got, err, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	a, b := create(s1), create(s1)
	exec := func(id, code string) *apitype.Result {
		t.Helper()
		r, err := s1.as(key).Execute(ctx, id, apitype.ExecuteRequest{Code: code}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := exec(a, "open('/workspace/kept.txt','w').write('a')"); r.Error != nil {
		t.Fatal(r.Error)
	}
	if _, err := s1.as(key).PauseSession(ctx, a); err != nil {
		t.Fatal(err)
	}
	seen("a paused on airlock-1", map[string]string{a: "paused", b: "idle"})
	// d cannot be paused: over max_image_bytes (its point stays at its
	// small file).
	d := create(s1)
	if r := exec(d, "open('/workspace/small.txt','w').write('d')"); r.Error != nil {
		t.Fatal(r.Error)
	}
	waitPoint(t, s1, d, "small.txt")
	if r := exec(d, "open('/workspace/big.bin','wb').write(b'x' * (2 << 20))"); r.Error != nil {
		t.Fatal(r.Error)
	}

	// SIGTERM: b is paused too; both stay listed while airlock-1 is down;
	// d ends (shutdown), its point kept.
	if err := s1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-s1.done; err != nil {
		t.Fatalf("airlock-1's exit: %v", err)
	}
	seen("airlock-1 stopped", map[string]string{a: "paused", b: "paused", d: ""})

	// Back on its volume: it holds all three (d recovered); a resumes;
	// c is live when it is killed -9.
	s1 = startServerNamed(t, s1.name, s1.cfg)
	seen("airlock-1 back after SIGTERM", map[string]string{a: "paused", b: "paused", d: "paused"})
	if info, err := s1.as(key).Session(ctx, d); err != nil || info.Paused == nil || !strings.HasPrefix(info.Paused.Recovered, "recovered after the server ended unexpectedly") {
		t.Errorf("d after the SIGTERM that could not pause it: %+v %v", info, err)
	}
	if _, err := s1.as(key).ResumeSession(ctx, a); err != nil {
		t.Fatal(err)
	}
	if r := exec(a, "print(open('/workspace/kept.txt').read())"); strings.TrimSpace(r.Stdout) != "a" {
		t.Errorf("a's file after pause, restart and resume: %+v", r)
	}
	c := create(s1)
	if r := exec(c, "open('/workspace/c.txt','w').write('c')"); r.Error != nil {
		t.Fatal(r.Error)
	}
	seen("airlock-1 back", map[string]string{a: "idle", b: "paused", c: "idle"})
	waitPoint(t, s1, a, "kept.txt")
	waitPoint(t, s1, c, "c.txt")
	if err := s1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s1.done
	seen("airlock-1 killed", map[string]string{a: "ended:server_lost", b: "paused", c: "ended:server_lost"})

	// Back once more: b is still its, a and c recovered from their
	// points, all listed paused on airlock-1 by airlock-0 (never
	// claimed by it); b deleted there leaves the directory.
	s1 = startServerNamed(t, s1.name, s1.cfg)
	seen("airlock-1 back after kill -9", map[string]string{a: "paused", b: "paused", c: "paused"})
	for _, id := range []string{a, c} {
		if info, err := s1.as(key).Session(ctx, id); err != nil || info.Paused == nil || !strings.HasPrefix(info.Paused.Recovered, "recovered after the server ended unexpectedly") {
			t.Errorf("%s on airlock-1 after kill -9: %+v %v", id, info, err)
		}
	}
	if info, err := s1.as(key).Session(ctx, b); err != nil || info.State != apitype.StatePaused {
		t.Fatalf("b on airlock-1 after kill -9: %+v %v", info, err)
	}
	if err := s1.as(key).DeleteSession(ctx, b); err != nil {
		t.Fatal(err)
	}
	seen("b deleted", map[string]string{b: ""})
}
