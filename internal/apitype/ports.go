package apitype

import "time"

// PortRequest is POST /v1/sessions/{id}/ports/{port}.
type PortRequest struct {
	// Public makes the port reachable by anyone who has its address,
	// without a token (the server must allow it: ports.allow_public).
	// false (the default) makes it private again.
	Public bool `json:"public,omitempty"`
}

// Port is a session's port opened to the outside: where a program
// listening on it inside the sandbox is reached, and what it carried.
type Port struct {
	Port   int  `json:"port"`
	Public bool `json:"public"`
	// Path is the port on the API's own origin (path form): for programs
	// and scripts; a web page there runs sandboxed, without cookies.
	Path string `json:"path"`
	// Host and URL are the port's own origin (host form,
	// <port>-<session host label>.<ports.domain>): for browsers. Absent
	// when the server has no ports.domain.
	Host string `json:"host,omitempty"`
	URL  string `json:"url,omitempty"`
	// Token opens a private port: send it as X-Airlock-Port-Token. Only
	// in the answer to POST.
	Token string `json:"token,omitempty"`
	// Link is URL with a one-time code (airlock_token) that sets the
	// port's cookie in a browser and is then used up; it expires at
	// LinkExpiresAt (ports.link_ttl). Only in the answer to POST, with a
	// host form.
	Link          string    `json:"link,omitempty"`
	LinkExpiresAt time.Time `json:"link_expires_at,omitzero"`
	// LinkCode is Link's one-time code (the API builds Link from it).
	LinkCode string `json:"-"`
	// OpenedAt: when the port was opened (by POST, or by a first request
	// with an API key).
	OpenedAt time.Time `json:"opened_at"`
	// Requests, Connections and OpenConnections count what reached the
	// program; BytesIn went to it, BytesOut came from it.
	Requests        int64 `json:"requests"`
	Connections     int64 `json:"connections"`
	OpenConnections int   `json:"open_connections"`
	BytesIn         int64 `json:"bytes_in"`
	BytesOut        int64 `json:"bytes_out"`
}

// PortList is GET /v1/sessions/{id}/ports.
type PortList struct {
	Ports []Port `json:"ports"`
}

// Credentials of a session's port, besides an API key.
const (
	// PortTokenHeader carries a port's token.
	PortTokenHeader = "X-Airlock-Port-Token"
	// PortKeyHeader carries an API key on a port's own host (where
	// Authorization is the program's).
	PortKeyHeader = "X-Airlock-Api-Key"
	// PortLinkParam is the query parameter of a one-time link code.
	PortLinkParam = "airlock_token"
)
