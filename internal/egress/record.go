package egress

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// maxSummaries bounds the summarised entries one execution's record
// keeps; decisions past it share one entry per kind and outcome.
const maxSummaries = 256

// Record is one decision, as an execution's result reports it, or
// several summarised: Count of them, made from First to Last.
type Record struct {
	Kind      string        `json:"kind"` // "dns", "connect" or "proxy"
	Execution string        `json:"execution,omitempty"`
	Name      string        `json:"name,omitempty"`
	Port      uint16        `json:"port,omitempty"`
	Dest      string        `json:"dest,omitempty"`    // what the sandbox connected to
	Address   string        `json:"address,omitempty"` // what airlock dialled
	Allowed   bool          `json:"allowed"`
	Reason    string        `json:"reason"`
	BytesUp   int64         `json:"bytes_up,omitempty"`
	BytesDown int64         `json:"bytes_down,omitempty"`
	Duration  time.Duration `json:"duration,omitempty"`
	Count     int64         `json:"count,omitempty"` // 0: one
	First     time.Time     `json:"first"`
	Last      time.Time     `json:"last,omitzero"` // when Count > 1
}

// Decision is a Record in progress.
type Decision struct {
	Kind, Execution, Name, Dest, Address string
	Port                                 uint16
	Allowed                              bool
	Start                                time.Time
	carried                              bool // set before it is recorded

	mu       sync.Mutex
	Reason   string
	detail   string // for the server's log only (the addresses refused)
	up, down atomic.Int64
	duration time.Duration
}

// Snapshot returns the decision as it stands.
func (d *Decision) Snapshot() Record {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Record{Kind: d.Kind, Execution: d.Execution, Name: d.Name, Port: d.Port, Dest: d.Dest, Address: d.Address,
		Allowed: d.Allowed, Reason: d.Reason, BytesUp: d.up.Load(), BytesDown: d.down.Load(), Duration: d.duration, First: d.Start}
}

// kept reports whether d is kept whole, never summarised: a connection
// carried (there are at most Limits.Connections of them). An allowed
// name whose upstream failed was carried nowhere: it is summarised.
func (d *Decision) kept() bool { return d.carried }

// ledger is what the gate keeps of one execution's decisions (or of
// those made outside any): every allowed connection whole, and the
// rest — denials, DNS lookups — summarised: one entry per kind, name,
// destination, port and reason, with a count and the first and last
// times, at most maxSummaries of them and then one per kind and outcome.
// Its size is bounded by the connection budget and maxSummaries, however
// many decisions a sandbox provokes.
type ledger struct {
	conns []*Decision
	sums  map[sumKey]*Record
}

type sumKey struct {
	kind, name, dest, reason string
	port                     uint16
	allowed                  bool
}

// summarise counts r in its entry.
func (l *ledger) summarise(r Record) {
	k := sumKey{r.Kind, r.Name, r.Dest, r.Reason, r.Port, r.Allowed}
	s, ok := l.sums[k]
	if !ok && len(l.sums) >= maxSummaries {
		outcome := "denied"
		if r.Allowed {
			outcome = "allowed"
		}
		k = sumKey{kind: r.Kind, allowed: r.Allowed,
			reason: outcome + ": more distinct destinations and reasons than a record lists one by one (" + strconv.Itoa(maxSummaries) + "), counted here"}
		s, ok = l.sums[k]
		r = Record{Kind: r.Kind, Allowed: r.Allowed, Reason: k.reason, First: r.First, Execution: r.Execution}
	}
	if !ok {
		if l.sums == nil {
			l.sums = map[sumKey]*Record{}
		}
		r.Count = 1
		l.sums[k] = &r
		return
	}
	s.Count++
	s.Last = r.First
}

// records returns the ledger's decisions, oldest first.
func (l *ledger) records() []Record {
	out := make([]Record, 0, len(l.conns)+len(l.sums))
	for _, d := range l.conns {
		out = append(out, d.Snapshot())
	}
	for _, s := range l.sums {
		r := *s
		if r.Count == 1 {
			r.Count = 0
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b Record) int { return a.First.Compare(b.First) })
	return out
}

// Summarized is how many decisions rs do not list one by one: folded
// into an entry's count.
func Summarized(rs []Record) int64 {
	var n int64
	for _, r := range rs {
		n += max(r.Count-1, 0)
	}
	return n
}
