package v1

import (
	"errors"
	"net/http/httptest"
	"testing"

	"airlock/internal/errdefs"
)

// A private port's cookie is every tenant's site's: a page of another
// port (same-site) or another site must not open a WebSocket with it or
// send a request that changes state; the port's own page, a link
// followed, and clients that are not browsers may.
func TestCookieRequestGuard(t *testing.T) {
	const host = "8000-abc.ports.test"
	for _, c := range []struct {
		name, method, origin, site, upgrade, scheme string
		refused                                     bool
	}{
		{"ws from another tenant's port", "GET", "https://8000-evil.ports.test", "same-site", "websocket", "https", true},
		{"ws from another site", "GET", "https://evil.test", "cross-site", "websocket", "https", true},
		{"ws from a null origin", "GET", "null", "", "websocket", "https", true},
		{"ws over http to an https page", "GET", "http://" + host, "", "websocket", "https", true},
		{"ws from its own page", "GET", "https://" + host, "same-origin", "websocket", "https", false},
		{"ws from its own page, http", "GET", "http://" + host, "same-origin", "WebSocket", "http", false},
		{"ws from a client, no Origin", "GET", "", "", "websocket", "https", false},
		{"POST from another tenant's port", "POST", "https://8000-evil.ports.test", "same-site", "", "https", true},
		{"POST same-site without Origin", "POST", "", "same-site", "", "https", true},
		{"DELETE cross-site", "DELETE", "", "cross-site", "", "https", true},
		{"PUT with a foreign Origin only", "PUT", "https://evil.test", "", "", "https", true},
		{"POST from its own page", "POST", "https://" + host, "same-origin", "", "https", false},
		{"POST from a client", "POST", "", "", "", "https", false},
		{"a link followed from elsewhere", "GET", "", "cross-site", "", "https", false},
		{"a read from another tenant's page", "GET", "https://8000-evil.ports.test", "same-site", "", "https", false},
	} {
		r := httptest.NewRequest(c.method, "http://"+host+"/x", nil)
		for k, v := range map[string]string{"Origin": c.origin, "Sec-Fetch-Site": c.site, "Upgrade": c.upgrade} {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		err := cookieRequestGuard(r, c.scheme)
		if c.refused != (err != nil) || err != nil && !errors.Is(err, errdefs.ErrPermission) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
