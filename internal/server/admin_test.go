package server

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"airlock/internal/apitype"
)

// follow (airlock audit --follow) prints every record once, in the
// order they become visible, including one whose seq is below a record
// already printed (another server's transaction committed later), as
// long as it comes within late; the history before it is read once.
func TestFollowLateCommits(t *testing.T) {
	start := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	clock := start
	rec := func(seq int64, age time.Duration) apitype.AuditRecord {
		return apitype.AuditRecord{Seq: seq, Time: clock.Add(-age), ID: fmt.Sprint("r", seq)}
	}
	// What each poll finds committed (cumulative), 1 s apart.
	visible := [][]apitype.AuditRecord{
		{rec(1, time.Hour), rec(2, time.Hour), rec(4, 0)}, // 3 not yet committed
		{rec(3, 0), rec(5, 0)},                            // 3 shows up late
		{rec(7, 0)},                                       // 6 never will (rolled back)
		{}, {}, {}, {}, {},                                // the hole at 6 is given up
		{rec(8, 0)},
		{rec(6, 0)}, // later than late after 7: missed, as documented
	}
	var committed []apitype.AuditRecord
	poll, reads := 0, map[int64]int{}
	read := func(after int64, each func(apitype.AuditRecord)) error {
		committed = append(committed, visible[poll]...)
		byseq := slices.Clone(committed)
		slices.SortFunc(byseq, func(a, b apitype.AuditRecord) int { return int(a.Seq - b.Seq) })
		for _, r := range byseq {
			if r.Seq > after {
				reads[r.Seq]++
				each(r)
			}
		}
		return nil
	}
	var got []int64
	next := func() bool {
		poll++
		clock = clock.Add(time.Second)
		return poll < len(visible)
	}
	err := follow(0, read, func(r apitype.AuditRecord) { got = append(got, r.Seq) }, func() {}, next, func() time.Time { return clock }, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{1, 2, 4, 3, 5, 7, 8}; !slices.Equal(got, want) {
		t.Errorf("printed %v, want %v", got, want)
	}
	if reads[1] != 1 || reads[2] != 1 {
		t.Errorf("the settled history was read again: %v", reads)
	}
}
