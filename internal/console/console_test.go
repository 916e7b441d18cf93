package console

import (
	"io/fs"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// Every page and script is served with the console's headers: a strict
// CSP (own script only, Trusted Types, no framing), nosniff, no referrer.
func TestHeaders(t *testing.T) {
	h := Handler()
	for _, p := range []string{"/ui/", "/ui", "/ui/app.js", "/ui/style.css", "/ui/favicon.svg", "/ui/nope", "/ui/../api"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", p, nil))
		for k, v := range Headers {
			if got := w.Header().Get(k); got != v {
				t.Errorf("%s: %s %q, want %q", p, k, got, v)
			}
		}
	}
	for _, want := range []string{"default-src 'none'", "script-src 'self';", "frame-ancestors 'none'", "require-trusted-types-for 'script'", "object-src 'none'", "base-uri 'none'"} {
		if !strings.Contains(CSP, want) {
			t.Errorf("the CSP lacks %q", want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "http:", "https:", "*"} {
		if strings.Contains(CSP, bad) {
			t.Errorf("the CSP allows %q", bad)
		}
	}
}

func TestFiles(t *testing.T) {
	h := Handler()
	for p, ct := range map[string]string{"/ui/": "text/html", "/ui": "text/html", "/ui/app.js": "javascript", "/ui/style.css": "text/css", "/ui/favicon.svg": "image/svg+xml"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", p, nil))
		if w.Code != 200 || !strings.Contains(w.Header().Get("Content-Type"), ct) || w.Body.Len() == 0 {
			t.Errorf("%s: %d %q", p, w.Code, w.Header().Get("Content-Type"))
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/ui/missing.js", nil))
	if w.Code != 404 {
		t.Errorf("a missing file: %d", w.Code)
	}
}

// The pages load nothing from elsewhere, have no inline script or
// style, and never write HTML into the DOM but through the srcdoc
// policy (a static check; the browser tests check what runs).
func TestNoRemoteNoInline(t *testing.T) {
	ui, _ := fs.Sub(files, "ui")
	index, _ := fs.ReadFile(ui, "index.html")
	if regexp.MustCompile(`(?i)<script[^>]*>[^<]+</script>|\sstyle=|\son[a-z]+=`).Match(index) {
		t.Error("index.html has inline script, style or an event handler")
	}
	fs.WalkDir(ui, ".", func(p string, d fs.DirEntry, err error) error {
		if d.IsDir() {
			return nil
		}
		b, _ := fs.ReadFile(ui, p)
		if regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).Match(b) || strings.Contains(string(b), "@import") {
			t.Errorf("%s loads something from elsewhere", p)
		}
		return nil
	})
	app, _ := fs.ReadFile(ui, "app.js")
	for _, bad := range []string{".innerHTML", ".outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "localStorage", "document.cookie"} {
		if strings.Contains(string(app), bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
	if n := strings.Count(string(app), "srcdocPolicy.createHTML("); n != 1 {
		t.Errorf("app.js makes HTML in %d places, want the one sandboxed iframe", n)
	}
}
