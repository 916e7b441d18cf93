package docgen

import (
	"fmt"
	"strings"

	"airlock/internal/metrics"
)

// Metrics renders docs/reference/metrics.md from the collectors.
func Metrics() string {
	var b strings.Builder
	b.WriteString(header("Metrics", "internal/metrics (the collectors a server registers)"))
	b.WriteString("`airlock serve` exports these at `/metrics` (see the\n" +
		"[observability guide](../guides/observability.md)), besides the Go runtime's (`go_*`)\n" +
		"and the process's (`process_*`). No label carries what a client picks freely.\n\n")
	b.WriteString("| metric | type | labels | what |\n| --- | --- | --- | --- |\n")
	for _, f := range metrics.Catalog() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.Name, f.Type, strings.Join(f.Labels, ", "), cell(f.Help))
	}
	return b.String()
}
