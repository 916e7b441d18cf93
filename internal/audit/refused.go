package audit

import (
	"net/netip"
	"sort"
	"sync"
	"time"

	"airlock/internal/apitype"
)

// Refused requests (failed authentication, probes of what the caller may
// not see) are counted, not recorded one by one: a flood of them must not
// fill the log or the writer's queue. Each interval (audit.refusal_interval)
// becomes at most maxRefusalKeys records, one per kind, reason, source
// and key, with its count, and past those one record per kind and reason
// with source "*" for all the rest.

// maxRefusalKeys bounds the distinct records of one interval.
const maxRefusalKeys = 256

type refusalKey struct {
	kind, reason, source, tenant, keyID string
}

type refusalCount struct {
	n           int
	first, last time.Time
	requestID   string // the first one's
}

type refusals struct {
	mu     sync.Mutex
	counts map[refusalKey]*refusalCount
}

// Refused counts a refused request: kind is AuditAuthFailure or
// AuditAccessDenied, reason why, source the client's address (host, no
// port), tenant and keyID the caller's when its key is known. It never
// blocks on the writer and costs a map lookup.
func (l *Log) Refused(kind, reason, source, tenant, keyID, requestID string) {
	if l == nil {
		return
	}
	l.refused.add(refusalKey{kind, reason, Source(source), tenant, keyID}, requestID, time.Now())
}

// Source is how refusals group a client's address: an IPv4 address as
// it is, an IPv6 one by its /64 (one client has a whole /64 to rotate
// through), anything else (the unix socket) as "local".
func Source(host string) string {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return "local"
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

func (r *refusals) add(k refusalKey, requestID string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[refusalKey]*refusalCount{}
	}
	c, ok := r.counts[k]
	if !ok && len(r.counts) >= maxRefusalKeys {
		k.source, k.tenant, k.keyID = "*", "", ""
		c, ok = r.counts[k]
	}
	if !ok {
		c = &refusalCount{first: now, requestID: requestID}
		r.counts[k] = c
	}
	c.n++
	c.last = now
}

// drain turns what was counted into records (oldest first) and starts a
// new interval.
func (r *refusals) drain(now time.Time) []apitype.AuditRecord {
	r.mu.Lock()
	counts := r.counts
	r.counts = nil
	r.mu.Unlock()
	out := make([]apitype.AuditRecord, 0, len(counts))
	for k, c := range counts {
		out = append(out, apitype.AuditRecord{Time: c.first, Until: c.last, Kind: k.kind, Reason: k.reason, Source: k.source,
			ActorTenant: k.tenant, KeyID: k.keyID, Count: c.n, RequestID: c.requestID, Outcome: "refused"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}
