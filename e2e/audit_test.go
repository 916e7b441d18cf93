package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
)

// waitAudit polls the audit log until it has at least n records matching
// q (they are committed by then: the API reads the database).
func (s *server) waitAudit(key string, q url.Values, n int) []apitype.AuditRecord {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := s.as(key).Audit(context.Background(), q)
		if err != nil {
			s.t.Fatal(err)
		}
		if len(l.Records) >= n || time.Now().After(deadline) {
			return l.Records
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Every kind of operation a client does leaves one record with its
// tenant, key, request id and outcome; code is kept as its SHA-256 and
// size (audit.code "sha256", the default), never whole. The records
// survive a kill -9 of the server and a restart, and `airlock audit`
// lists them from the database.
func TestAuditRecordsSurviveKill9(t *testing.T) {
	s := keysServer(t, nil)
	ctx := context.Background()
	key := s.newKey("audited")
	c := s.as(key)
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	code := "secret_value = 'do-not-store-me'\nprint(len(secret_value))"
	if _, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: code}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: "1/0"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunCommand(ctx, sess.ID, apitype.CommandRequest{Command: "echo hi; exit 3"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upload(ctx, sess.ID, "in.txt", strings.NewReader("12345"), 5); err != nil {
		t.Fatal(err)
	}
	rc, err := c.Download(ctx, sess.ID, "in.txt")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.ReadFrom(rc)
	rc.Close()
	if err := c.DeleteFile(ctx, sess.ID, "in.txt", false); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunOnce(ctx, apitype.OneShotRequest{Code: "print(2)"}, nil); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := s.rawH("POST", "/v1/run", `{"language":"python","code":"import sys; sys.exit(4)"}`, key); code != 200 {
		t.Fatalf("run: %d %s", code, body)
	}

	want := []string{"session.create", "execution", "execution", "command", "file.upload", "file.download", "file.delete", "session.end", "oneshot", "program"}
	recs := s.waitAudit(key, url.Values{"limit": {"1000"}}, len(want))
	check := func(recs []apitype.AuditRecord, when string) {
		t.Helper()
		var kinds []string
		for _, r := range recs {
			kinds = append(kinds, r.Kind)
			if r.Tenant != "audited" || !strings.HasPrefix(r.KeyID, "key_") || r.RequestID == "" {
				t.Errorf("%s: %s record without its caller: %+v", when, r.Kind, r)
			}
			if r.Code != "" || strings.Contains(r.Code, "do-not-store-me") {
				t.Errorf("%s: code stored whole: %+v", when, r)
			}
		}
		if strings.Join(kinds, " ") != strings.Join(want, " ") {
			t.Fatalf("%s: kinds\n %s\nwant\n %s", when, strings.Join(kinds, " "), strings.Join(want, " "))
		}
		sum := sha256.Sum256([]byte(code))
		if ex := recs[1]; ex.CodeSHA256 != hex.EncodeToString(sum[:]) || ex.CodeSize != len(code) || ex.Outcome != "ok" || ex.Session != sess.ID || ex.ID != "e1" || ex.CPUMs <= 0 || ex.PeakMemory <= 0 {
			t.Errorf("%s: execution record %+v", when, ex)
		}
		if ex := recs[2]; ex.Outcome != "error" || ex.Error != "ZeroDivisionError" {
			t.Errorf("%s: failing execution %+v", when, ex)
		}
		if r := recs[3]; r.Outcome != "error" || r.ExitCode == nil || *r.ExitCode != 3 || r.CodeSize != len("echo hi; exit 3") {
			t.Errorf("%s: command %+v", when, r)
		}
		if r := recs[4]; r.Path != "in.txt" || r.BytesIn != 5 {
			t.Errorf("%s: upload %+v", when, r)
		}
		if r := recs[5]; r.BytesOut != 5 {
			t.Errorf("%s: download %+v", when, r)
		}
		if r := recs[7]; r.EndReason == "" {
			t.Errorf("%s: session end %+v", when, r)
		}
		if r := recs[9]; r.ExitCode == nil || *r.ExitCode != 4 || r.Session != "" {
			t.Errorf("%s: program %+v", when, r)
		}
	}
	check(recs, "before kill -9")

	// kill -9, then a server on the same data directory.
	cfg := s.cfg
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.done
	s2 := startServerNamed(t, s.name, cfg)
	check(s2.waitAudit(key, url.Values{"limit": {"1000"}}, len(want)), "after kill -9")
	// And new records follow the old ones.
	if _, err := s2.as(key).RunOnce(ctx, apitype.OneShotRequest{Code: "1"}, nil); err != nil {
		t.Fatal(err)
	}
	after := s2.waitAudit(key, url.Values{"kind": {"oneshot"}}, 2)
	if len(after) != 2 || after[1].Seq <= recs[len(recs)-1].Seq {
		t.Errorf("records after the restart: %+v", after)
	}

	// airlock audit on the host lists them, as JSON and as a table.
	out, err := s2.airlockCLI("audit", "--session", sess.ID, "--json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 8 {
		t.Errorf("airlock audit --session: %d lines, want 8:\n%s", len(lines), out)
	}
	var first apitype.AuditRecord
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.Kind != "session.create" {
		t.Errorf("first line %q: %v", lines[0], err)
	}
	table, err := s2.airlockCLI("audit", "--since", "1h")
	if err != nil || !strings.Contains(table, "KIND") || !strings.Contains(table, "file.upload") || !strings.Contains(table, "ZeroDivisionError") {
		t.Errorf("airlock audit table: %v\n%s", err, table)
	}
	t.Logf("airlock audit --since 1h:\n%s", table)
}
