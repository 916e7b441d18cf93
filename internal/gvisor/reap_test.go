package gvisor

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Orphans of programs started in the sandbox are reaped by its init: a
// killed command's background jobs leave no zombies.
func TestInitReapsOrphans(t *testing.T) {
	h, _ := testHost(t)
	sb, err := h.Start(context.Background(), Spec{Name: "g-reap", Limits: limits()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	e, _, _ := runIn(t, sb, []string{"/bin/sh", "-c", "sleep 0.2 >/dev/null 2>&1 & exit 0"})
	if e.Status.ExitStatus() != 0 {
		t.Fatal(e)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, out, _ := runIn(t, sb, []string{"/bin/sh", "-c", "ps -eo stat,comm | grep sleep || true"})
		if strings.TrimSpace(out) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphans left: %q", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
