package docgen

import (
	"fmt"
	"net/http"
	"strings"

	"airlock/internal/errdefs"
)

// Errors renders docs/reference/errors.md from errdefs' table and the
// comments of its sentinels in the source at dir.
func Errors(dir string) (string, error) {
	src, err := parseSource(dir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(header("Errors", "internal/errdefs (its table and the sentinels' comments)"))
	b.WriteString("Every error has a stable code. The HTTP API answers it with its status and a JSON body,\n" +
		"`{\"error\": {\"code\": \"...\", \"message\": \"...\"}}` (with `Retry-After` when the client may\n" +
		"retry later); MCP tools return the code and message as an error result; a command of\n" +
		"`airlock` that fails with it exits with its exit status. A message says what to do; the\n" +
		"detail of an internal error goes to the server's log under the request's id, never to\n" +
		"the client.\n\n")
	b.WriteString("| code | HTTP status | exit status | meaning |\n| --- | --- | --- | --- |\n")
	for _, k := range errdefs.Kinds() {
		what := "the server's own failure; its detail is logged, never sent"
		if k.Err != nil {
			name, ok := src.errs[k.Err.Error()]
			if !ok {
				return "", fmt.Errorf("errdefs: no sentinel declared with errors.New(%q)", k.Err.Error())
			}
			what = strings.TrimPrefix(src.values[name], name+": ")
			if what == "" {
				return "", fmt.Errorf("errdefs: %s has no comment", name)
			}
		}
		fmt.Fprintf(&b, "| `%s` | %d %s | %d | %s |\n", k.Code, k.HTTPStatus, http.StatusText(k.HTTPStatus), k.Exit, cell(what))
	}
	b.WriteString("\nExit statuses that no error code has:\n\n| exit status | meaning |\n| --- | --- |\n")
	for _, c := range []string{"ExitNoInput", "ExitCantCreate", "ExitConfig"} {
		fmt.Fprintf(&b, "| %s | %s |\n", exitValue(c), cell(src.values[c]))
	}
	b.WriteString("\n`airlock run` otherwise exits with the program's own status, or 137 when airlock killed it\n" +
		"([exit statuses, with examples](../guides/run-and-one-shots.md#exit-statuses)).\n")
	return b.String(), nil
}

func exitValue(name string) string {
	switch name {
	case "ExitNoInput":
		return fmt.Sprint(errdefs.ExitNoInput)
	case "ExitCantCreate":
		return fmt.Sprint(errdefs.ExitCantCreate)
	case "ExitConfig":
		return fmt.Sprint(errdefs.ExitConfig)
	}
	return "?"
}
