package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"airlock/internal/apitype"
	"airlock/internal/bench"
	"airlock/internal/config"
	"airlock/internal/doctor"
	"airlock/internal/store"
)

// What a tenant's code can put in a file name, an exception's name, a key
// name or an error: a forged row, CSI, OSC (title, clipboard), C1 as
// UTF-8 and as a byte, bidirectional overrides, bytes that are not UTF-8.
var hostile = []string{
	"x\n2026-01-01 00:00:00  execution  forged",
	"\x1b[2J\x1b[H",
	"\x1b]0;owned\x07",
	"\x1b]52;c;ZWNobyBoaQ==\x07",
	"\u009b31m", "\x9b31m",
	"a\u202eexe.txt", "\u2066rtl\u2069",
	"\r\b\x7f\x00", "\xff\xfe",
}

// unsafeAt returns the index of the first byte in out a terminal acts on
// (every C0 but the newline, DEL, C1, bidi controls, non-UTF-8), or -1.
func unsafeAt(out string) int {
	for i, r := range out {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD"):
			return i
		case r == '\n':
		case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
			return i
		case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return i
		}
	}
	return -1
}

// checkOutput fails unless out is safe for a terminal and has lines lines.
func checkOutput(t *testing.T, what, out string, lines int) {
	t.Helper()
	if i := unsafeAt(out); i >= 0 {
		t.Errorf("%s: a terminal would act on byte %d: %q", what, i, out[max(0, i-20):min(len(out), i+20)])
	}
	if n := strings.Count(out, "\n"); n != lines {
		t.Errorf("%s: %d lines, want %d (a forged line?):\n%s", what, n, lines, out)
	}
}

// Every human-readable output that shows what tenants or sandboxes chose
// escapes it: audit's table, keys list, doctor's report, bench's errors,
// airlock's error messages and kill notes.
func TestHumanOutputIsEscaped(t *testing.T) {
	dir := t.TempDir()
	withEnv(t, "AIRLOCK_DATA_DIR="+dir)
	db, err := store.OpenSQLite(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var recs []apitype.AuditRecord
	for _, h := range hostile {
		exit := 1
		recs = append(recs, apitype.AuditRecord{Time: time.Now(), Kind: apitype.AuditFileUpload, Tenant: h, Session: h, ID: h, Language: h,
			Outcome: h, ExitCode: &exit, Error: h, KillReason: apitype.KillReason(h), EndReason: h, Path: h, KeyID: h, Code: h},
			apitype.AuditRecord{Time: time.Now(), Kind: h, Path: h})
		if _, _, err := db.CreateKey(ctx, "team-a", false, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.AppendAudit(ctx, recs); err != nil {
		t.Fatal(err)
	}
	db.Close()

	var out, stderr bytes.Buffer
	if code := auditCmd([]string{"--since", "1h"}, &out, &stderr); code != 0 {
		t.Fatalf("audit: exit %d: %s", code, stderr.String())
	}
	checkOutput(t, "audit", out.String(), len(recs)+1)

	out.Reset()
	if code := keysCmd([]string{"list"}, &out, &stderr); code != 0 {
		t.Fatalf("keys list: exit %d: %s", code, stderr.String())
	}
	checkOutput(t, "keys list", out.String(), len(hostile)+1)

	out.Reset()
	r := &doctor.Report{}
	for _, h := range hostile {
		r.Checks = append(r.Checks, doctor.Check{Name: h, Status: doctor.OK, Detail: "first line\n" + h})
	}
	r.Print(&out)
	// A detail's lines stay lines (indented under it): the first payload's
	// newline is one more.
	checkOutput(t, "doctor", out.String(), 2*len(hostile)+2+1)

	out.Reset()
	(&bench.Report{Errors: hostile}).Print(&out)
	checkOutput(t, "bench", out.String(), 2*len(hostile)+4)

	for _, h := range hostile {
		out.Reset()
		exitFor(&out, fmt.Errorf("the server said: %s", h))
		report(&apitype.OneShotResult{Result: &apitype.Result{Killed: true, KillReason: apitype.KillReason(h), Egress: []apitype.EgressDecision{{Host: h, Port: 443}, {Dest: h}}}},
			config.DefaultLimits(), false, nil, &out, &out)
		checkOutput(t, "messages", out.String(), 3)
	}
}

// airlock top escapes every field of a session a tenant or its code
// chose: ids, tenants, templates, states, the running code's head, and
// the pod (a name from the shared store).
func TestTopIsEscaped(t *testing.T) {
	var list []apitype.Session
	now := time.Now()
	for _, h := range hostile {
		list = append(list, apitype.Session{ID: h, Pod: h, Tenant: h, Language: h, Template: h, State: h, CreatedAt: now, LastUsedAt: now,
			Usage:   &apitype.Usage{MemoryBytes: 1 << 20, CPUPercent: 50},
			Current: &apitype.CurrentExecution{ID: h, StartedAt: now, CodeHead: h + "\nsecond line " + h},
			Network: &apitype.NetworkState{Connections: 1}})
	}
	var out bytes.Buffer
	topFrame(&out, list, now)
	checkOutput(t, "top", out.String(), len(hostile)+3)
}
