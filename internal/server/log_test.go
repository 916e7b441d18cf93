package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"airlock/internal/config"
)

func TestNewLogger(t *testing.T) {
	var b bytes.Buffer
	NewLogger(config.Log{Format: "json", Level: "warn"}, &b).Info("hidden")
	NewLogger(config.Log{Format: "json", Level: "warn"}, &b).Warn("shown", "request", "r-1")
	var line map[string]any
	if err := json.Unmarshal(b.Bytes(), &line); err != nil || line["msg"] != "shown" || line["request"] != "r-1" {
		t.Errorf("json log %q: %v", b.String(), err)
	}
	b.Reset()
	NewLogger(config.Log{Format: "text", Level: "debug"}, &b).Debug("request", "status", 200)
	if !strings.Contains(b.String(), "msg=request status=200") {
		t.Errorf("text log with -v: %q", b.String())
	}
}
