// Command airlock runs untrusted code in layered Linux jails: once from the
// command line (airlock run), as a service with stateful sessions (airlock
// serve), and reports what this host can enforce (airlock doctor).
//
// It owns the flags and how results are printed, nothing more: the server
// is composed in internal/server, API calls go through internal/client,
// and policy lives in the packages below. It must never grow logic a
// server or a test would need too.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/server"
	"airlock/internal/termtext"
)

// Exit statuses of airlock itself, distinct from those of the sandboxed
// program, which airlock run passes through. Errors map to theirs in
// errdefs' one table (exitFor); docs/guides/run-and-one-shots.md lists them all.
const (
	exitUsage       = errdefs.ExitUsage       // bad flags or arguments
	exitNoInput     = errdefs.ExitNoInput     // an input file cannot be read
	exitUnavailable = errdefs.ExitUnavailable // cannot run as asked here
	exitSoftware    = errdefs.ExitSoftware    // an internal error
	exitCantCreate  = errdefs.ExitCantCreate  // an output file cannot be written (--out)
	exitConfig      = errdefs.ExitConfig      // the configuration is invalid
	exitKilled      = 137                     // airlock killed the program (reason on stderr)
)

const usage = `airlock runs untrusted code in layered Linux jails.

Usage:
  airlock run [flags] FILE|- [ARGS...]   run a program once in a fresh jail
  airlock serve [flags]                   serve the HTTP API with sessions
  airlock mcp [flags]                     serve MCP on stdin/stdout (for agents)
  airlock doctor [flags]                  show what this host can enforce
  airlock bench [flags]                   measure latency against baselines
  airlock keys create|list|revoke|quota   manage API keys and tenants' quotas
  airlock template list|import|build|rm   manage the root filesystems sandboxes may use
  airlock audit [flags]                   list the audit log (--follow: as it grows)
  airlock top [flags]                     the live sessions of a server
  airlock config print|env                the effective configuration (secrets masked)
  airlock version

Run "airlock COMMAND -h" for the flags of a command.
`

var version = "dev"

func main() {
	// A sealed re-execution of this binary is a sandbox's init.
	server.MainIfInit()
	// Descriptors inherited from whoever started airlock must never reach
	// a sandbox: mark them all close-on-exec before anything is started.
	unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(exitUsage)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var code int
	switch cmd {
	case "run":
		code = runCmd(args, os.Stdin, os.Stdout, os.Stderr)
	case "doctor":
		code = doctorCmd(args, os.Stdout, os.Stderr)
	case "serve":
		code = serveCmd(args, os.Stderr)
	case "mcp":
		code = mcpCmd(args, os.Stderr)
	case "bench":
		code = benchCmd(args, os.Stdout, os.Stderr)
	case "keys":
		code = keysCmd(args, os.Stdout, os.Stderr)
	case "template":
		code = templateCmd(args, os.Stdout, os.Stderr)
	case "audit":
		code = auditCmd(args, os.Stdout, os.Stderr)
	case "top":
		code = topCmd(args, os.Stdout, os.Stderr)
	case "config":
		code = configCmd(args, os.Stdout, os.Stderr)
	case "version", "--version":
		fmt.Println("airlock", version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "airlock: unknown command %q\n\n%s", cmd, usage)
		code = exitUsage
	}
	os.Exit(code)
}

// exitFor prints err and returns its exit status: errdefs' table, or
// exitConfig for a configuration that cannot be built.
func exitFor(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "airlock: %s\n", termtext.Field(err.Error())) // may quote a server's words
	var ce *config.Error
	if errors.As(err, &ce) {
		return exitConfig
	}
	return errdefs.ExitCode(err)
}

// command is what every subcommand starts from: its flags, printing its
// usage text on -h or a bad flag, its name in messages, and the flags
// that set configuration keys.
type command struct {
	name    string
	fs      *flag.FlagSet
	stderr  io.Writer
	cfgPath *string
	// overrides are the configuration keys the flags given set, in order.
	overrides []config.Flag
}

func newCommand(name, usage string, stderr io.Writer) *command {
	c := &command{name: name, fs: flag.NewFlagSet("airlock "+name, flag.ContinueOnError), stderr: stderr}
	c.fs.SetOutput(stderr)
	c.fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		c.fs.PrintDefaults()
	}
	return c
}

// configFlag binds --config.
func (c *command) configFlag() {
	c.cfgPath = c.fs.String("config", "", "configuration file (default $AIRLOCK_CONFIG)")
}

// keyFlags lists the flags that set a configuration key, by command
// ("serve --listen": "server.listen"): the tests check each one.
var keyFlags = map[string]string{}

// keyFlag binds --name, which sets the configuration key key: its value
// is read as the key's AIRLOCK_ variable's would be, and the result is
// validated with the rest (config.Build), never applied after.
func (c *command) keyFlag(name, key, usage string) {
	keyFlags[c.name+" --"+name] = key
	c.fs.Func(name, usage, func(v string) error {
		c.overrides = append(c.overrides, config.Flag{Name: "--" + name, Key: key, Value: v})
		return nil
	})
}

// keySwitch binds the boolean -name, which sets key to value when given.
func (c *command) keySwitch(name, key, value, usage string) {
	keyFlags[c.name+" -"+name] = key
	c.fs.BoolFunc(name, usage, func(s string) error {
		on, err := strconv.ParseBool(s)
		if on {
			c.overrides = append(c.overrides, config.Flag{Name: "-" + name, Key: key, Value: value})
		}
		return err
	})
}

// parse parses args; when it fails (or -h asked for the usage), the
// command ends with code.
func (c *command) parse(args []string) (code int, ok bool) {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return exitUsage, false
	}
	return 0, true
}

// environ is the environment the configuration reads (tests set their
// own).
var environ = os.Environ

// loadConfig builds the effective configuration (server.LoadConfig:
// defaults, file, environment, this command's flags, then validation);
// when it cannot, the command ends with code.
func (c *command) loadConfig() (cfg config.Config, code int, ok bool) {
	src := config.Sources{Env: environ(), Flags: c.overrides}
	if c.cfgPath != nil {
		src.File = *c.cfgPath
	}
	cfg, err := server.LoadConfig(src)
	if err != nil {
		fmt.Fprintf(c.stderr, "airlock %s: %v\n", c.name, err)
		return cfg, exitConfig, false
	}
	return cfg, 0, true
}
