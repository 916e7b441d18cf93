package config

// E2B configures the E2B-compatible API (docs/guides/e2b.md).
type E2B struct {
	// Enabled serves E2B's control plane (/sandboxes, /v2/sandboxes)
	// and its sandboxes' data plane (routed by the E2b-Sandbox-Id
	// header) on the server's listener, beside /v1.
	Enabled bool `json:"enabled"`
}
