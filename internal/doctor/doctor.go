// Package doctor owns `airlock doctor`: it probes each protection this
// host supports, says whether it will be applied as configured, proves the
// whole jail by building one and asking a program inside what it got, and
// checks the language runtimes and their packages. It also prepares the
// per-host cache that sandboxes share (the matplotlib font list).
//
// It must never report a protection as applied without having observed
// it, and never change the configuration to make a check pass.
package doctor

import (
	"fmt"
	"io"
	"strings"

	"airlock/internal/termtext"
)

// Status of one check.
type Status string

const (
	OK   Status = "ok"
	Off  Status = "off"  // disabled by configuration
	Warn Status = "warn" // works, with a caveat
	Fail Status = "FAIL" // a configured protection cannot be applied
)

// Check is one line of the report.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
}

// Report is the whole result.
type Report struct {
	Checks []Check `json:"checks"`
}

func (r *Report) add(name string, st Status, format string, args ...any) {
	r.Checks = append(r.Checks, Check{Name: name, Status: st, Detail: fmt.Sprintf(format, args...)})
}

// OK reports whether airlock can run code as configured.
func (r *Report) OK() bool {
	for _, c := range r.Checks {
		if c.Status == Fail {
			return false
		}
	}
	return true
}

// Print writes the report as aligned text.
func (r *Report) Print(w io.Writer) {
	width := 0
	for _, c := range r.Checks {
		width = max(width, len(termtext.Field(c.Name)))
	}
	for _, c := range r.Checks {
		// Details quote what sandboxes answered (a probe's output, package
		// versions): escaped, line by line.
		fmt.Fprintf(w, "%-4s  %-*s  %s\n", c.Status, width, termtext.Field(c.Name), strings.ReplaceAll(termtext.Lines(c.Detail), "\n", "\n"+strings.Repeat(" ", width+8)))
	}
	if r.OK() {
		fmt.Fprintln(w, "\nairlock can run code on this host with every configured protection.")
	} else {
		fmt.Fprintln(w, "\nairlock will refuse to run code: a configured protection cannot be applied (see FAIL above).")
	}
}
