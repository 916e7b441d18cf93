// Package console owns airlock's web console: the static pages under /ui/
// (plain HTML, CSS and JavaScript, embedded in the binary: no CDN, no
// build step) and the headers they are served with. Every figure the
// pages show is fetched from the API with the signed-in key, which the
// pages keep in the tab's sessionStorage and send as Authorization.
//
// It must never serve anything but its embedded files, never read or set
// a credential (no cookie, no key in a URL), and never let what sandboxed
// code printed act in its origin: the Content-Security-Policy below allows
// the console's own script only, requires Trusted Types (so the pages
// cannot assign HTML to the DOM but through the one policy that fills a
// sandboxed iframe), and forbids framing; the pages put text in with
// textContent and show HTML and SVG only in iframes sandboxed without
// scripts or the console's origin.
package console

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

//go:embed ui
var files embed.FS

// Prefix is where the console is served.
const Prefix = "/ui/"

// CSP is the Content-Security-Policy of every console page.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"frame-src 'none'; child-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; " +
	"require-trusted-types-for 'script'; trusted-types airlock-srcdoc"

// Headers are set on every console response.
var Headers = map[string]string{
	"Content-Security-Policy":      CSP,
	"X-Content-Type-Options":       "nosniff",
	"Referrer-Policy":              "no-referrer",
	"X-Frame-Options":              "DENY",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
	"Permissions-Policy":           "camera=(), microphone=(), geolocation=(), usb=(), clipboard-read=()",
	// The pages are small and change with the binary: always revalidated.
	"Cache-Control": "no-cache",
}

// Handler serves the console's files under Prefix (and Prefix without its
// slash, as the index).
func Handler() http.Handler {
	ui, err := fs.Sub(files, "ui")
	if err != nil {
		panic("console: " + err.Error()) // the embedded tree is this package's own
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range Headers {
			w.Header().Set(k, v)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(Prefix, "/")), "/")
		if name == "" {
			name = "index.html"
		}
		data, err := fs.ReadFile(ui, name)
		if err != nil || strings.Contains(name, "/") {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte("404 not found: the console serves index.html, app.js, style.css and favicon.svg\n"))
			return
		}
		ct := mime.TypeByExtension(path.Ext(name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		w.Header().Set("Content-Type", ct)
		if r.Method == http.MethodHead {
			return
		}
		w.Write(data)
	})
}
