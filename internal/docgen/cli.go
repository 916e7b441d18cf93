package docgen

import (
	"fmt"
	"strings"
)

// CLI renders docs/reference/cli.md from the usage text of each command.
func CLI(commands []Command) string {
	var b strings.Builder
	b.WriteString(header("Command line", "cmd/airlock (each command's flag set, as -h prints it)"))
	b.WriteString("Exit statuses: [errors](errors.md). Configuration keys that flags set:\n" +
		"[configuration](configuration.md).\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "\n## %s\n\n```\n%s\n```\n", c.Name, strings.TrimRight(c.Usage, "\n"))
	}
	return b.String()
}
