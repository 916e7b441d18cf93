package mcp_test

import (
	"context"
	"strings"
	"testing"
)

// The templates a session may run on, and the ports of a session's
// sandbox, are tools too: list_templates answers what the API lists;
// expose_port opens a port of the connection's default session (private:
// a public one is refused on a server that does not allow them) and says
// where it is reached, list_ports lists it, close_port closes it.
func TestPortAndTemplateTools(t *testing.T) {
	cs, api := connect(t)
	ctx := context.Background()

	res, out := call(t, cs, "list_templates", map[string]any{})
	list, err := api.Templates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || out["templates"] == nil || len(out["templates"].([]any)) != len(list.Templates) {
		t.Errorf("list_templates: %s %v, the API lists %+v", text(res), out, list)
	}

	res, out = call(t, cs, "expose_port", map[string]any{"port": 8000})
	if res.IsError {
		t.Fatalf("expose_port: %s", text(res))
	}
	sid, _ := out["session_id"].(string)
	path := "/v1/sessions/" + sid + "/ports/8000/"
	if sid == "" || out["path"] != path || out["public"] != false || !strings.Contains(text(res), path) {
		t.Errorf("expose_port: %s %v", text(res), out)
	}
	if ports, err := api.Ports(ctx, sid); err != nil || len(ports) != 1 || ports[0].Port != 8000 {
		t.Errorf("the API's ports after expose_port: %+v %v", ports, err)
	}
	res, out = call(t, cs, "list_ports", map[string]any{})
	if ps, _ := out["ports"].([]any); res.IsError || len(ps) != 1 || out["session_id"] != sid {
		t.Errorf("list_ports: %s %v", text(res), out)
	}
	for name, args := range map[string]map[string]any{
		"a public port":   {"port": 8001, "public": true},
		"port 0":          {"port": 0},
		"a port too high": {"port": 70000},
	} {
		if res, _ := call(t, cs, "expose_port", args); !res.IsError {
			t.Errorf("expose_port of %s: %s", name, text(res))
		}
	}
	res, out = call(t, cs, "close_port", map[string]any{"port": 8000})
	if res.IsError || out["closed"] != true {
		t.Errorf("close_port: %s %v", text(res), out)
	}
	if ports, err := api.Ports(ctx, sid); err != nil || len(ports) != 0 {
		t.Errorf("the API's ports after close_port: %+v %v", ports, err)
	}
	res, _ = call(t, cs, "list_ports", map[string]any{})
	if !strings.Contains(text(res), "no port") {
		t.Errorf("list_ports once closed: %s", text(res))
	}
}
