package apitype

import "time"

// Template describes a template a request may name (GET /v1/templates):
// the version new sessions get, what it was made from, and what it runs.
type Template struct {
	// Name is what a request's "template" names.
	Name string `json:"name"`
	// Version is the one new sessions get; sessions made from an older
	// one keep theirs (Session.TemplateVersion).
	Version string    `json:"version"`
	Created time.Time `json:"created"`
	// Source is what it was made from: "dir", "oci-layout",
	// "oci-archive", "docker-archive" or "debian".
	Source string `json:"source"`
	// From names the image file, directory or Debian suite.
	From string `json:"from,omitempty"`
	// Digest is the OCI image's manifest digest, or a Debian build's
	// cache key.
	Digest string `json:"digest,omitempty"`
	// Languages are those whose interpreter the template's root has: a
	// session or code context of another language is refused on it.
	Languages []string `json:"languages"`
	// Size is the bytes of its files; Files counts them.
	Size  int64 `json:"size"`
	Files int64 `json:"files"`
	// Pool is its warm pool's size per language (templates.pool);
	// absent: its sandboxes are made on request.
	Pool map[string]int `json:"pool,omitempty"`
	// Default is set on the template of a request naming none.
	Default bool `json:"default,omitempty"`
	// Packages are the Debian packages a build installed (only in GET
	// /v1/templates/{name}).
	Packages []string `json:"packages,omitempty"`
}

// TemplateList is GET /v1/templates: the templates the caller may name.
type TemplateList struct {
	Templates []Template `json:"templates"`
	// Default is the template of a request naming none; empty: the
	// host's root.
	Default string `json:"default"`
}
