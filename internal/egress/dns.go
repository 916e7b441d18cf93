package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// fakeTTL is the TTL of fake answers: short, so that a policy change is
// seen by resolvers that cache.
const fakeTTL = 5

// dnsAnswer builds the reply to one query message. fake returns the fake
// address of an allowed name (ok false: the name is denied). It returns
// nil when the message is not worth an answer (not a query, unparsable
// header). name is the normalised question name ("" if none), qtype its
// type.
func dnsAnswer(msg []byte, fake func(name string) (netip.Addr, bool)) (reply []byte, name string, qtype dnsmessage.Type, allowed bool) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil, "", 0, false
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	q, err := p.Question()
	if err != nil || h.OpCode != 0 {
		rh.RCode = dnsmessage.RCodeFormatError
		if h.OpCode != 0 {
			rh.RCode = dnsmessage.RCodeNotImplemented
		}
		b := dnsmessage.NewBuilder(nil, rh)
		out, _ := b.Finish()
		return out, "", 0, false
	}
	qtype = q.Type
	raw := q.Name.String()
	n, nerr := NormalizeName(raw)
	var addr netip.Addr
	if nerr == nil {
		name = n
		addr, allowed = fake(n)
	} else {
		name = strings.ToLower(strings.TrimSuffix(raw, "."))
	}
	if !allowed || q.Class != dnsmessage.ClassINET {
		rh.RCode = dnsmessage.RCodeNameError
	}
	rh.Authoritative = true
	b := dnsmessage.NewBuilder(make([]byte, 0, 128), rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, name, qtype, false
	}
	if err := b.Question(q); err != nil {
		return nil, name, qtype, false
	}
	if allowed && q.Class == dnsmessage.ClassINET && (q.Type == dnsmessage.TypeA || q.Type == dnsmessage.TypeALL) {
		// Only A: AAAA, HTTPS and SVCB stay empty (NODATA), so there is
		// no IPv6 path and no ECH configuration to hide the SNI behind.
		if err := b.StartAnswers(); err != nil {
			return nil, name, qtype, false
		}
		rr := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: fakeTTL}
		if err := b.AResource(rr, dnsmessage.AResource{A: addr.As4()}); err != nil {
			return nil, name, qtype, false
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil, name, qtype, false
	}
	return out, name, qtype, allowed
}

// serveDNSUDP answers queries on pc until it is closed.
func (g *Gate) serveDNSUDP(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if reply := g.dnsQuery(buf[:n]); reply != nil {
			if len(reply) > 512 {
				// Never happens with one A record; truncate to be safe.
				reply = reply[:12]
				reply[2] |= 0x02
			}
			pc.WriteTo(reply, from)
		}
	}
}

// serveDNSTCP answers length-prefixed queries on each accepted connection.
func (g *Gate) serveDNSTCP(l net.Listener) {
	sem := make(chan struct{}, 16)
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: no spinning
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			resetClose(c)
			continue
		}
		// A connection like any other: under the session's connection
		// cap and the server's (one session holding DNS connections must
		// not take the server's cap from every other).
		release, reason, _ := g.admit()
		if release == nil {
			<-sem
			g.record(&Decision{Kind: "dns", Start: time.Now(), Reason: "denied: " + reason + " (DNS over TCP)"}, true)
			resetClose(c)
			continue
		}
		if !g.track(c) {
			<-sem
			release()
			resetClose(c)
			return
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer func() { <-sem; g.untrack(c); c.Close(); release() }()
			var lenb [2]byte
			buf := make([]byte, 65535)
			for {
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadFull(c, lenb[:]); err != nil {
					return
				}
				n := binary.BigEndian.Uint16(lenb[:])
				if _, err := io.ReadFull(c, buf[:n]); err != nil {
					return
				}
				reply := g.dnsQuery(buf[:n])
				if reply == nil {
					return
				}
				out := binary.BigEndian.AppendUint16(nil, uint16(len(reply)))
				c.SetWriteDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Write(append(out, reply...)); err != nil {
					return
				}
			}
		}()
	}
}

// dnsRefused is the reply to a query over the session's rate: REFUSED,
// with the question echoed (resolvers drop a reply whose question does not
// match theirs, and would wait for their timeout). name is the question's
// name, for the record; nil when the message is not worth an answer.
func dnsRefused(msg []byte) (reply []byte, name string) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil, ""
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired,
		RecursionAvailable: true, RCode: dnsmessage.RCodeRefused}
	b := dnsmessage.NewBuilder(make([]byte, 0, 128), rh)
	if q, err := p.Question(); err == nil {
		name = strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
		if b.StartQuestions() != nil || b.Question(q) != nil {
			return nil, ""
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil, ""
	}
	return out, name
}

// dnsToken takes one of the session's DNS queries (Limits.DNSRate) at
// now, or reports the rate exceeded. The sandbox's queries take them,
// and so do airlock's own upstream lookups of names the sandbox chose.
func (g *Gate) dnsToken(now time.Time) bool {
	if g.limits.DNSRate <= 0 {
		return true
	}
	g.dnsMu.Lock()
	defer g.dnsMu.Unlock()
	if g.dnsBucket.take(now, float64(g.limits.DNSRate), float64(max(g.limits.DNSBurst, 1))) {
		return true
	}
	g.limits.Shared.dnsRefusal()
	return false
}

func (g *Gate) dnsRateReason() string {
	return fmt.Sprintf("the session's DNS query rate (%d a second, burst %d) is exceeded", g.limits.DNSRate, g.limits.DNSBurst)
}

// dnsOverRate answers a query over the session's DNS rate: REFUSED at
// once rather than silence, so that resolvers fail fast instead of
// waiting out their timeouts and retrying (the sandbox's own resolver is
// the only one to receive it: no reflection). It is recorded (records
// summarise a flood into one entry per name) and counted as denied; at
// most one line a second is logged, carrying how many refusals it stands
// for, so that a flood costs no log lines.
func (g *Gate) dnsOverRate(msg []byte, now time.Time) []byte {
	reply, name := dnsRefused(msg)
	g.record(&Decision{Kind: "dns", Name: clip(name), Start: now, Reason: "denied: " + g.dnsRateReason() + ": REFUSED"}, false)
	g.dnsMu.Lock()
	g.dnsUnlogged++
	n := g.dnsUnlogged
	logNow := now.Sub(g.dnsLogged) >= time.Second
	if logNow {
		g.dnsLogged, g.dnsUnlogged = now, 0
	}
	g.dnsMu.Unlock()
	if logNow {
		g.logDNSRefused(n)
	}
	return reply
}

// logDNSRefused logs n queries refused over the session's DNS rate.
func (g *Gate) logDNSRefused(n int64) {
	if n > 0 {
		g.log.LogAttrs(context.Background(), slog.LevelWarn, "egress DNS queries refused (rate limit)",
			slog.String("session", g.session), slog.Int64("count", n), slog.String("reason", g.dnsRateReason()))
	}
}

func (g *Gate) dnsQuery(msg []byte) []byte {
	start := time.Now()
	if !g.dnsToken(start) {
		return g.dnsOverRate(msg, start)
	}
	var why string
	reply, name, qtype, allowed := dnsAnswer(msg, func(name string) (netip.Addr, bool) {
		var a netip.Addr
		a, why = g.fakeAddr(name)
		return a, why == ""
	})
	if reply == nil && name == "" {
		return nil
	}
	d := &Decision{Kind: "dns", Name: name, Allowed: allowed, Start: start}
	switch {
	case allowed && (qtype == dnsmessage.TypeA || qtype == dnsmessage.TypeALL):
		d.Reason = "allowed: answered with a fake address (" + typeName(qtype) + ")"
	case allowed:
		// dnsAnswer answers only A: say so rather than claim an answer.
		d.Reason = "allowed: no " + typeName(qtype) + " answer (only A records are given)"
	case why != "":
		d.Reason = "denied: " + clip(why) + " (NXDOMAIN)"
	default:
		d.Reason = "denied: " + clip(name) + " is not a valid name (NXDOMAIN)"
	}
	g.record(d, true)
	return reply
}

func typeName(t dnsmessage.Type) string {
	s := t.String()
	return strings.TrimPrefix(s, "Type")
}
