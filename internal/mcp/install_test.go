package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"airlock/internal/client"
)

// install_packages is in tools/list only when the server installs with a
// package manager; create_session always takes a network policy.
func TestInstallToolOnlyWhenConfigured(t *testing.T) {
	api := client.InProcess(http.NotFoundHandler())
	for _, installs := range [][]string{nil, {"pip"}, {"pip", "npm"}} {
		cs := connectWith(t, api, installs)
		tools, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var install, create string
		for _, tool := range tools.Tools {
			b, _ := json.Marshal(tool.InputSchema)
			switch tool.Name {
			case "install_packages":
				install = string(b)
			case "create_session":
				create = string(b)
			}
		}
		want, _ := json.Marshal(installs)
		if (install != "") != (len(installs) > 0) || len(installs) > 0 && !strings.Contains(install, `"enum":`+string(want)) {
			t.Errorf("installs %v: install_packages %q", installs, install)
		}
		if !strings.Contains(create, `"network":{`) || !strings.Contains(create, `"allow":{`) {
			t.Errorf("create_session takes no network: %s", create)
		}
	}
}
