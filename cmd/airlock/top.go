package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/termtext"
)

const topUsage = `Usage: airlock top [flags]

Shows the live sessions of a server, refreshed every --interval: tenant,
language, state, age, idle time, memory and CPU now, the execution
running (the head of its code) and egress counts, busiest first; with a
shared store, every server's sessions, and the pod each lives on. It
reads the local server through its unix socket (as root: every tenant's
sessions), or with --url a remote one with the API key of
$AIRLOCK_API_KEY or --key-file (that key's sessions). Every field code
or tenants chose is escaped before it reaches the terminal. With --once,
or when the output is not a terminal, it prints the list once.

Flags:
`

func topCmd(args []string, stdout, stderr io.Writer) int {
	c := newCommand("top", topUsage, stderr)
	c.configFlag()
	remote := c.fs.String("url", "", "a remote server's address (https://HOST:8080)")
	keyFile := c.fs.String("key-file", "", "with --url: a file holding the API key (default $AIRLOCK_API_KEY)")
	every := c.fs.Duration("interval", 2*time.Second, "how often to refresh")
	once := c.fs.Bool("once", false, "print the list once and exit")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if *every < 200*time.Millisecond {
		fmt.Fprintln(stderr, "airlock top: --interval must be at least 200ms")
		return exitUsage
	}
	var cl *client.Client
	if *remote != "" {
		u, err := url.Parse(*remote)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fmt.Fprintf(stderr, "airlock top: --url %q is not an http(s) URL (https://HOST:8080)\n", termtext.Field(*remote))
			return exitUsage
		}
		key, err := apiKey(*keyFile)
		if err != nil {
			fmt.Fprintf(stderr, "airlock top: %v\n", err)
			return exitNoInput
		}
		cl = client.New(strings.TrimRight(u.String(), "/"), client.WithToken(key))
	} else {
		if *keyFile != "" {
			fmt.Fprintln(stderr, "airlock top: --key-file goes with --url")
			return exitUsage
		}
		cfg, code, ok := c.loadConfig()
		if !ok {
			return code
		}
		if cfg.SocketPath() == "" {
			fmt.Fprintln(stderr, "airlock top: the server has no unix socket (server.socket \"off\"): use --url")
			return exitUsage
		}
		cl = client.Unix(cfg.SocketPath())
	}
	defer cl.CloseIdleConnections()
	f, isFile := stdout.(*os.File)
	live := !*once && isFile && termtext.IsTerminal(f)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	for {
		req, cancel := context.WithTimeout(ctx, 10*time.Second)
		list, err := cl.Sessions(req)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			if errors.Is(err, client.ErrUnreachable) && *remote == "" {
				fmt.Fprintln(stderr, "airlock top: no local server answers on its unix socket (is `airlock serve` running, with this configuration?)")
				return exitUnavailable
			}
			return exitFor(stderr, err)
		}
		if live {
			// Home and clear: the only escapes written are these.
			io.WriteString(stdout, "\x1b[H\x1b[2J")
		}
		topFrame(stdout, list, time.Now())
		if !live {
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(*every):
		}
	}
}

// topFrame writes the session list as a table, busiest first: every cell
// that sandboxed code or a tenant chose (ids, tenants, templates, code)
// escaped by termtext.Field, so that nothing in it moves the cursor,
// rewrites the title or forges a row.
func topFrame(w io.Writer, list []apitype.Session, now time.Time) {
	sort.SliceStable(list, func(i, j int) bool {
		bi, bj := list[i].State == apitype.StateBusy, list[j].State == apitype.StateBusy
		if bi != bj {
			return bi
		}
		return cpuOf(list[i]) > cpuOf(list[j])
	})
	busy, mem := 0, int64(0)
	for _, s := range list {
		if s.State == apitype.StateBusy {
			busy++
		}
		if s.Usage != nil {
			mem += s.Usage.MemoryBytes
		}
	}
	fmt.Fprintf(w, "airlock top — %s — %d sessions, %d busy, %s memory\n\n", now.Format("15:04:05"), len(list), busy, apitype.Size(mem))
	// A cluster's listing (a shared store) says where each session lives.
	pods := slices.ContainsFunc(list, func(s apitype.Session) bool { return s.Pod != "" })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if pods {
		fmt.Fprint(tw, "POD\t")
	}
	fmt.Fprintln(tw, "SESSION\tTENANT\tLANG\tSTATE\tAGE\tIDLE\tMEM\tCPU%\tRUNNING\tEGRESS")
	for _, s := range list {
		if pods {
			fmt.Fprintf(tw, "%s\t", field(s.Pod))
		}
		lang := s.Language
		if s.Template != "" {
			lang += "/" + s.Template
		}
		memText, cpu := "-", "-"
		if s.Usage != nil {
			memText = apitype.Size(s.Usage.MemoryBytes).String()
			cpu = fmt.Sprintf("%.0f", s.Usage.CPUPercent)
		}
		idle := "-"
		if s.State != apitype.StateBusy {
			idle = age(now.Sub(s.LastUsedAt))
		}
		running := "-"
		if cur := s.Current; cur != nil {
			head, _, _ := strings.Cut(cur.CodeHead, "\n")
			if len(head) > 48 {
				head = strings.ToValidUTF8(head[:48], "") + "…"
			}
			running = cur.ID + " " + age(now.Sub(cur.StartedAt)) + " " + head
		}
		egress := "-"
		if n := s.Network; n != nil {
			egress = fmt.Sprintf("%d conn, %d denied", n.Connections, n.Denied)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", field(s.ID), field(s.Tenant), field(lang), field(s.State),
			age(now.Sub(s.CreatedAt)), idle, memText, cpu, field(running), egress)
	}
	tw.Flush()
}

func cpuOf(s apitype.Session) float64 {
	if s.Usage == nil {
		return -1
	}
	return s.Usage.CPUPercent
}

// age is a duration as top shows it: 42s, 3m05s, 2h10m, 3d.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
