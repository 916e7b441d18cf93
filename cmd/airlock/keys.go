package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/server"
	"airlock/internal/termtext"
)

const keysUsage = `Usage:
  airlock keys create --tenant NAME [--admin] [--name TEXT] [--expires 30d] [quota flags]
  airlock keys list [--json]
  airlock keys revoke ID
  airlock keys quota --tenant NAME [quota flags]

Manages API keys in the store: the database of data_dir (on this host,
as root; a running server sees changes on its next request), or the
PostgreSQL of store.dsn that a cluster's servers share (every server sees
them within a second). create prints the new
key once: it is stored hashed and cannot be shown again. Quota flags set
the tenant's own quotas (over the configuration's "quotas"); 0 removes one.

Flags:
`

// quotaFlags are the flags that set a tenant's quotas.
type quotaFlags struct {
	fs                                   *flag.FlagSet
	sessions, perMinute, cpuPerDay       *int
	running                              *int
	memory, timeout, cpus, egress, allow *string
}

func addQuotaFlags(fs *flag.FlagSet) *quotaFlags {
	return &quotaFlags{fs: fs,
		sessions:  fs.Int("max-sessions", 0, "quota: live sessions at most"),
		perMinute: fs.Int("executions-per-minute", 0, "quota: executions started in any 60 seconds"),
		cpuPerDay: fs.Int("cpu-seconds-per-day", 0, "quota: CPU-seconds per UTC day"),
		running:   fs.Int("max-concurrent-executions", 0, "quota: executions, commands, one-shot and program runs in flight at once"),
		memory:    fs.String("max-memory", "", "ceiling: the memory limit a session may ask for (e.g. 1G)"),
		timeout:   fs.String("max-timeout", "", "ceiling: the timeout an execution may ask for (e.g. 2m)"),
		cpus:      fs.String("max-cpus", "", "ceiling: the CPUs a session may ask for"),
		egress:    fs.String("egress", "", "network egress: allow or deny"),
		allow:     fs.String("egress-allow", "", "host names egress may reach, comma-separated"),
	}
}

// apply sets on q the quotas whose flags were given.
func (f *quotaFlags) apply(q *config.Quotas) (changed bool, err error) {
	f.fs.Visit(func(fl *flag.Flag) {
		if err != nil {
			return
		}
		changed = true
		switch fl.Name {
		case "max-sessions":
			q.MaxSessions = *f.sessions
		case "executions-per-minute":
			q.ExecutionsPerMinute = *f.perMinute
		case "cpu-seconds-per-day":
			q.CPUSecondsPerDay = *f.cpuPerDay
		case "max-concurrent-executions":
			q.MaxConcurrentExecutions = *f.running
		case "max-memory":
			q.MaxLimits.Memory, err = config.ParseSize(*f.memory)
		case "max-timeout":
			q.MaxLimits.Timeout, err = config.ParseDuration(*f.timeout)
		case "max-cpus":
			_, err = fmt.Sscanf(*f.cpus, "%g", &q.MaxLimits.CPUs)
		case "egress":
			q.Egress = *f.egress
		case "egress-allow":
			q.EgressAllow = nil
			for _, h := range strings.Split(*f.allow, ",") {
				if h = strings.TrimSpace(h); h != "" {
					q.EgressAllow = append(q.EgressAllow, h)
				}
			}
		}
	})
	if err == nil {
		err = q.Validate()
	}
	return changed, err
}

func keysCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, keysUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return 0
	}
	sub, args := args[0], args[1:]
	c := newCommand("keys "+sub, keysUsage, stderr)
	c.configFlag()
	var tenant, name, expires *string
	var admin, asJSON *bool
	var qf *quotaFlags
	switch sub {
	case "create", "quota":
		tenant = c.fs.String("tenant", "", "the tenant the key acts for (required)")
		qf = addQuotaFlags(c.fs)
		if sub == "create" {
			admin = c.fs.Bool("admin", false, "the key sees and acts on every tenant's resources")
			name = c.fs.String("name", "", "a note on what the key is for")
			expires = c.fs.String("expires", "", "the key stops working after this long (30d, 12h) or at this RFC 3339 time (default: never)")
		}
	case "list":
		asJSON = c.fs.Bool("json", false, "print JSON")
	case "revoke":
	default:
		fmt.Fprintf(stderr, "airlock keys: unknown subcommand %q\n\n%s", sub, keysUsage)
		return exitUsage
	}
	if code, ok := c.parse(args); !ok {
		return code
	}
	cfg, code, ok := c.loadConfig()
	if !ok {
		return code
	}
	ctx := context.Background()
	db, err := server.OpenAdmin(ctx, cfg)
	if err != nil {
		return exitFor(stderr, err)
	}
	defer db.Close()
	if !db.Served(ctx) {
		// The usual slip: keys written where no server looks (a server
		// started with another --config, AIRLOCK_DATA_DIR or store).
		fmt.Fprintf(stderr, "airlock keys: note: no running airlock server uses %s: only one started with it will read these keys (is the server's --config, AIRLOCK_DATA_DIR or store another?)\n", termtext.Field(db.Where()))
	}
	switch sub {
	case "create", "quota":
		if *tenant == "" || c.fs.NArg() > 0 {
			fmt.Fprintf(stderr, "airlock keys %s: --tenant NAME is required, and nothing else\n", sub)
			return exitUsage
		}
		q, err := db.Quotas(ctx, *tenant)
		if err != nil {
			return exitFor(stderr, err)
		}
		changed, err := qf.apply(&q)
		if err != nil {
			fmt.Fprintf(stderr, "airlock keys %s: %v\n", sub, err)
			return exitUsage
		}
		if changed {
			if err := db.SetQuotas(ctx, *tenant, q); err != nil {
				return exitFor(stderr, err)
			}
		}
		if sub == "quota" {
			printQuotas(stdout, *tenant, q)
			return 0
		}
		var until time.Time
		if *expires != "" {
			if until, err = config.ParseExpiry(*expires, time.Now()); err != nil {
				fmt.Fprintf(stderr, "airlock keys create: --expires: %v\n", err)
				return exitUsage
			}
		}
		secret, k, err := db.CreateKey(ctx, *tenant, *admin, *name, until)
		if err != nil {
			return exitFor(stderr, err)
		}
		fmt.Fprintln(stdout, secret)
		exp := ""
		if k.ExpiresAt != nil {
			exp = ", expiring " + k.ExpiresAt.Format(time.RFC3339)
		}
		fmt.Fprintf(stderr, "created key %s for tenant %s%s%s; the key above is shown only once\n", termtext.Field(k.ID), termtext.Field(k.Tenant), map[bool]string{true: " (admin)"}[k.Admin], exp)
	case "list":
		keys, tenants, err := db.Keys(ctx)
		if err != nil {
			return exitFor(stderr, err)
		}
		if *asJSON {
			b, _ := json.MarshalIndent(map[string]any{"keys": keys, "tenants": tenants}, "", "  ")
			fmt.Fprintln(stdout, string(b))
			return 0
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTENANT\tADMIN\tCREATED\tREVOKED\tEXPIRES\tSTATE\tNAME")
		now := time.Now()
		for _, k := range keys {
			rev, exp := "-", "-"
			if k.RevokedAt != nil {
				rev = k.RevokedAt.Format(time.RFC3339)
			}
			if k.ExpiresAt != nil {
				exp = k.ExpiresAt.Format(time.RFC3339)
			}
			state := k.State(now)
			if state == apitype.KeyLive {
				state = "live"
			}
			fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t%s\t%s\n", termtext.Field(k.ID), termtext.Field(k.Tenant), k.Admin, k.CreatedAt.Format(time.RFC3339), rev, exp, state, termtext.Field(k.Name))
		}
		tw.Flush()
		names := make([]string, 0, len(tenants))
		for t := range tenants {
			names = append(names, t)
		}
		sort.Strings(names)
		for _, t := range names {
			printQuotas(stdout, t, tenants[t])
		}
	case "revoke":
		if c.fs.NArg() != 1 {
			fmt.Fprintln(stderr, "airlock keys revoke: name one key ID (see airlock keys list)")
			return exitUsage
		}
		if err := db.RevokeKey(ctx, c.fs.Arg(0)); err != nil {
			return exitFor(stderr, err)
		}
		fmt.Fprintf(stderr, "revoked %s: requests with it fail from now on\n", termtext.Field(c.fs.Arg(0)))
	}
	return 0
}

const auditUsage = `Usage: airlock audit [flags]

Lists the audit log from the store (the database of data_dir, on this
host, as root; or the PostgreSQL of store.dsn: every server's records);
the server need not run. Oldest first; with --follow, then every new
record as it is written, until interrupted (like tail -f).

Flags:
`

func auditCmd(args []string, stdout, stderr io.Writer) int {
	c := newCommand("audit", auditUsage, stderr)
	c.configFlag()
	since := c.fs.String("since", "24h", "records from this long ago, or from an RFC 3339 time")
	until := c.fs.String("until", "", "records before this (duration ago or RFC 3339)")
	sess := c.fs.String("session", "", "only this session's records")
	tenant := c.fs.String("tenant", "", "only this tenant's records")
	kind := c.fs.String("kind", "", "only records of this kind ("+strings.Join(apitype.AuditKinds(), ", ")+"), or of a group (session, file, package)")
	limit := c.fs.Int("limit", 0, "at most this many records (0: all)")
	asJSON := c.fs.Bool("json", false, "print one JSON record per line")
	follow := c.fs.Bool("follow", false, "after the records so far, print new ones as they are written, until interrupted")
	every := c.fs.Duration("interval", time.Second, "with --follow: how often to look for new records")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if *follow && (*until != "" || *limit != 0) {
		fmt.Fprintln(stderr, "airlock audit: --follow goes on with new records: --until and --limit do not go with it")
		return exitUsage
	}
	if *every < 100*time.Millisecond {
		fmt.Fprintln(stderr, "airlock audit: --interval must be at least 100ms")
		return exitUsage
	}
	if *kind != "" {
		if _, err := apitype.AuditKindFilter(*kind); err != nil {
			fmt.Fprintf(stderr, "airlock audit: --kind: %v\n", err)
			return exitUsage
		}
	}
	cfg, code, ok := c.loadConfig()
	if !ok {
		return code
	}
	now := time.Now()
	q := apitype.AuditQuery{Session: *sess, Tenant: *tenant, Kind: *kind}
	var err error
	if q.Since, err = apitype.ParseAuditTime(*since, now); err == nil {
		q.Until, err = apitype.ParseAuditTime(*until, now)
	}
	if err != nil {
		fmt.Fprintf(stderr, "airlock audit: %v\n", err)
		return exitUsage
	}
	if !server.StoreExists(cfg) {
		fmt.Fprintf(stderr, "airlock audit: no database in %s (data_dir)\n", cfg.DataDir)
		return exitNoInput
	}
	db, err := server.OpenAdmin(context.Background(), cfg)
	if err != nil {
		return exitFor(stderr, err)
	}
	defer db.Close()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "TIME\tKIND\tTENANT\tSESSION\tID\tLANG\tOUTCOME\tEXIT\tMS\tCPU_MS\tDETAIL")
	}
	each := func(r apitype.AuditRecord) {
		if *asJSON {
			b, _ := json.Marshal(r)
			fmt.Fprintln(stdout, string(b))
			return
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t%s\n", r.Time.Local().Format("2006-01-02 15:04:05"), field(r.Kind), field(r.Tenant), field(r.Session),
			field(r.ID), field(r.Language), field(r.Outcome), exitText(r.ExitCode), r.DurationMs, r.CPUMs, detail(r))
	}
	if *follow {
		// Until SIGINT or SIGTERM; each batch is printed as it comes (a
		// table's columns are aligned within a batch).
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		err = db.Follow(ctx, q, *every, each, func() { tw.Flush() })
	} else {
		err = db.Audit(context.Background(), q, *limit, each)
	}
	tw.Flush()
	if err != nil {
		return exitFor(stderr, err)
	}
	return 0
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// field is a cell of a table: "-" when empty, escaped (records and names
// hold what tenants and their code chose: a newline would forge a row,
// an ESC drive the operator's terminal).
func field(s string) string { return termtext.Field(dash(s)) }

// printQuotas prints a tenant's quotas as one line.
func printQuotas(w io.Writer, tenant string, q config.Quotas) {
	b, _ := json.Marshal(q)
	fmt.Fprintf(w, "tenant %s quotas: %s\n", termtext.Field(tenant), termtext.Field(string(b)))
}

func exitText(p *int) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

// detail is the rest of a record worth a glance.
func detail(r apitype.AuditRecord) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+termtext.Field(v))
		}
	}
	add("error", r.Error)
	add("killed", string(r.KillReason))
	add("end", r.EndReason)
	add("path", r.Path)
	if r.CodeSHA256 != "" {
		add("code", fmt.Sprintf("sha256:%.12s/%dB", r.CodeSHA256, r.CodeSize))
	} else if r.Code != "" {
		c := strings.ReplaceAll(r.Code, "\n", "⏎")
		if len(c) > 40 {
			c = strings.ToValidUTF8(c[:40], "") + "…"
		}
		parts = append(parts, "code="+strconv.Quote(c)) // escaped as Field would
	}
	if r.BytesIn > 0 {
		add("in", fmt.Sprint(r.BytesIn))
	}
	if r.BytesOut > 0 {
		add("out", fmt.Sprint(r.BytesOut))
	}
	if r.FilesChanged > 0 {
		add("files", fmt.Sprint(r.FilesChanged))
	}
	add("reason", r.Reason)
	add("source", r.Source)
	if r.Count > 0 {
		add("count", fmt.Sprint(r.Count))
	}
	if n := r.Network; n != nil {
		add("allow", "["+strings.Join(n.Allow, ",")+"]")
		if r.Kind == apitype.AuditSessionNetwork {
			add("was", "["+strings.Join(n.Previous, ",")+"]")
		}
	}
	if len(r.Egress) > 0 {
		add("egress", fmt.Sprint(len(r.Egress)))
	}
	if r.EgressSummarized > 0 {
		add("egress_summarized", fmt.Sprint(r.EgressSummarized))
	}
	add("key", r.KeyID)
	if r.Admin {
		add("admin", "true")
	}
	add("actor_tenant", r.ActorTenant)
	return strings.Join(parts, " ")
}
