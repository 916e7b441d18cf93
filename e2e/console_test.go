package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/notebook/notebooktest"
	"airlock/internal/testenv"
)

// tab is a headless Chromium (Debian's package) driving one tab, with
// what the pages said: console messages and dialogs.
type tab struct {
	t   *testing.T
	ctx context.Context
	mu  sync.Mutex
	// console: every console message of the page and its frames;
	// dialogs: every alert, confirm or prompt (accepted when expected).
	console []string
	dialogs []string
	expect  string // a dialog whose message starts with it is expected
}

// newTab starts Chromium with a fresh profile and no network beyond what
// the test serves; it is gone when the test ends.
func newTab(t *testing.T) *tab {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Skip(t, "no chromium for the console's browser tests (apt-get install chromium; scripts/install-deps.sh --tests)")
	}
	dir := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox, // as root (the test's own browser, only ever on the test's server)
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.WindowSize(1280, 1000),
		// Its temporary files in the test's directory, not /tmp.
		chromedp.Env("TMPDIR=" + dir),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &tab{t: t, ctx: ctx}
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("chromium: %v", err)
	}
	dialogs := make(chan string, 16)
	chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			b.mu.Lock()
			b.console = append(b.console, strings.Join(parts, " "))
			b.mu.Unlock()
		case *runtime.EventExceptionThrown:
			b.mu.Lock()
			b.console = append(b.console, "exception: "+ev.ExceptionDetails.Text+" "+exceptionText(ev.ExceptionDetails))
			b.mu.Unlock()
		case *page.EventJavascriptDialogOpening:
			b.mu.Lock()
			b.dialogs = append(b.dialogs, ev.Message)
			b.mu.Unlock()
			dialogs <- ev.Message
		}
	})
	go func() {
		for msg := range dialogs {
			b.mu.Lock()
			ok := b.expect != "" && strings.HasPrefix(msg, b.expect)
			b.mu.Unlock()
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: ok})
		}
	}()
	return b
}

func exceptionText(d *runtime.ExceptionDetails) string {
	if d.Exception != nil {
		return d.Exception.Description
	}
	return ""
}

// do runs actions, failing the test on an error (each bounded: the
// page waits for events, never for a time).
func (b *tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.shot("failed-" + what)
		b.mu.Lock()
		b.t.Logf("the page's console: %q", b.console)
		b.mu.Unlock()
		if text, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector("main").innerText`)); err == nil {
			b.t.Logf("the page says: %s", truncate(text, 3000))
		}
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func (b *tab) eval(expr string) any {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[any](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// wait waits until expr is truthy in the page.
func (b *tab) wait(what, expr string) {
	b.t.Helper()
	b.do(what, chromedp.Action[chromedp.Void](func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(25*time.Second))(ctx, t)
		return chromedp.Void{}, err
	}))
}

// shot keeps a screenshot of the page among the test's artifacts.
func (b *tab) shot(name string) {
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.t.ArtifactDir(), strings.ReplaceAll(name, " ", "-")+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot: %s", p)
}

// signIn signs in with key from the console's sign-in form.
func (b *tab) signIn(url, key string) {
	b.t.Helper()
	b.do("sign in",
		chromedp.Navigate(url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), key),
		chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#sessions")))
}

// The console in a real browser: it refuses without a key and works with
// one; a tenant sees its own sessions, an admin all; a session's page
// shows an execution live (its output so far, then its plot); a running
// cell is interrupted and a session ended from the page.
func TestConsoleBrowser(t *testing.T) {
	s := keysServer(t, map[string]any{"server": map[string]any{"token": "admin-token"}})
	ctx := context.Background()
	keyA, keyB := s.newKey("team-a"), s.newKey("team-b")
	a, bcl := s.as(keyA), s.as(keyB)
	sa, err := a.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := bcl.CreateSession(ctx, apitype.CreateSessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	b := newTab(t)

	// Without a key: the sign-in form, and the API refuses the page.
	b.do("open", chromedp.Navigate(s.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#signin")))
	if st := b.eval(`fetch("/v1/sessions").then(r => r.status)`); st != float64(401) {
		t.Errorf("the API without a key answered the page %v", st)
	}
	b.do("a wrong key", chromedp.SendKeys(chromedp.CSS("#key"), "alk_wrong"), chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)))
	b.wait("refused", `document.querySelector("#signin-error") && document.querySelector("#signin-error").textContent.includes("refused")`)
	if got := b.eval(`sessionStorage.getItem("airlock.key")`); got != nil {
		t.Errorf("a refused key stays in sessionStorage: %v", got)
	}

	// Tenant A sees its session, not B's.
	b.signIn(s.URL, keyA)
	b.wait("A's session listed", `document.querySelector('tr[data-session="`+sa.ID+`"]') !== null`)
	if b.eval(`document.querySelector('tr[data-session="`+sb.ID+`"]') === null`) != true {
		t.Error("tenant A's console lists B's session")
	}
	if c := b.eval(`document.cookie`); c != "" {
		t.Errorf("the console set cookies: %v", c)
	}
	if b.eval(`performance.getEntriesByType("resource").some(e => e.name.includes("alk_"))`) != false {
		t.Error("the key appeared in a URL")
	}
	b.shot("sessions-tenant")

	// The list's columns and filters: memory against its limit; a text
	// or a state that matches nothing hides the row, cleared shows it.
	row := `document.querySelector('tr[data-session="` + sa.ID + `"]')`
	b.wait("memory and CPU", row+` && `+row+`.children[6].textContent.includes(" / ") && `+row+`.children[7].textContent.includes("%")`)
	// The server each lives on (with a store: a cluster's list is every
	// server's).
	if l, err := a.Sessions(ctx); err != nil || len(l) != 1 || l[0].Pod == "" {
		t.Fatalf("the API's list: %v %+v", err, l)
	} else {
		b.wait("its pod", row+`.querySelector(".pod") !== null && `+row+`.querySelector(".pod").textContent === `+jsString(l[0].Pod))
	}
	setFilter := func(sel, value, event string) {
		b.t.Helper()
		b.eval(`(() => { const e = document.querySelector("` + sel + `"); e.value = "` + value + `"; e.dispatchEvent(new Event("` + event + `")); return true })()`)
	}
	setFilter("#filter-text", "no-such-session", "input")
	b.wait("filtered out by text", row+` === null && document.querySelector("#sessions-count").textContent.startsWith("0 of")`)
	setFilter("#filter-text", sa.ID[:8], "input")
	b.wait("found by its id", row+` !== null`)
	setFilter("#filter-state", "busy", "change")
	b.wait("filtered out by state", row+` === null`)
	setFilter("#filter-state", "", "change")
	setFilter("#filter-text", "", "input")
	b.wait("shown again", row+` !== null`)

	// A session's page, live: the output so far, then the plot.
	b.do("session page", chromedp.Navigate(s.URL+"/ui/#/session/"+sa.ID), chromedp.WaitVisible(chromedp.CSS("#cells")))
	done := make(chan error, 1)
	go func() {
		_, err := a.Execute(ctx, sa.ID, apitype.ExecuteRequest{Code: liveCode}, nil)
		done <- err
	}()
	b.wait("the running cell's output", `[...document.querySelectorAll(".cell.running pre.stdout")].some(p => p.textContent.includes("starting"))`)
	b.shot("session-running")
	upload(t, a, sa.ID, "go", "plot")
	b.wait("the plot while it runs", `document.querySelector(".cell.running img.rich") !== null`)
	b.shot("session-plot-live")
	upload(t, a, sa.ID, "go", "end")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.wait("the cell's end", `[...document.querySelectorAll(".cell:not(.running) pre.stdout")].some(p => p.textContent.includes("done")) && document.querySelector(".cell:not(.running) img.rich").naturalWidth > 100`)
	b.shot("session-plot")

	// Its files, browsed and downloaded (with the key, saved, never
	// rendered); its egress (none: no policy); its notebook.
	dl := t.TempDir()
	if _, err := chromedp.CallBrowser(b.ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dl}); err != nil {
		t.Fatal(err)
	}
	b.do("files tab", chromedp.Click(chromedp.CSS(`button[data-tab="Files"]`)))
	b.wait("the file listed", `[...document.querySelectorAll("#files-table a.file")].some(a => a.textContent === "go")`)
	b.shot("session-files")
	b.eval(`([...document.querySelectorAll("#files-table a.file")].find(a => a.textContent === "go").click(), true)`)
	if got := waitFile(t, filepath.Join(dl, "go")); string(got) != "end" {
		t.Errorf("the downloaded file holds %q, want %q", got, "end")
	}
	b.do("egress tab", chromedp.Click(chromedp.CSS(`button[data-tab="Egress"]`)))
	b.wait("no egress", `document.querySelector("#egress-table") !== null && document.querySelector("#egress").textContent.includes("No egress decisions")`)
	b.do("notebook tab", chromedp.Click(chromedp.CSS(`button[data-tab="Notebook"]`)), chromedp.Click(chromedp.CSS("#notebook")))
	var nb struct {
		NBFormat int `json:"nbformat"`
		Cells    []struct {
			CellType string `json:"cell_type"`
		} `json:"cells"`
	}
	saved := waitFile(t, filepath.Join(dl, "airlock-"+sa.ID+".ipynb"))
	if err := json.Unmarshal(saved, &nb); err != nil || nb.NBFormat != 4 || len(nb.Cells) != 1 || nb.Cells[0].CellType != "code" {
		t.Errorf("the downloaded notebook: %v %+v", err, nb)
	}
	notebooktest.Validate(t, saved)

	// Interrupt a running cell from the page.
	go func() {
		_, err := a.Execute(ctx, sa.ID, apitype.ExecuteRequest{Code: "import time\nprint('sleeping', flush=True)\ntime.sleep(600)"}, nil)
		done <- err
	}()
	b.wait("the sleeping cell", `[...document.querySelectorAll(".cell.running pre.stdout")].some(p => p.textContent.includes("sleeping"))`)
	b.do("interrupt", chromedp.Click(chromedp.CSS(".toolbar button.interrupt")))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.wait("the interrupted cell", `[...document.querySelectorAll(".cell pre.err")].some(p => p.textContent.includes("KeyboardInterrupt"))`)
	b.shot("session-interrupted")

	// End the session from the page (a confirm first).
	b.mu.Lock()
	b.expect = "End session"
	b.mu.Unlock()
	b.do("end", chromedp.Click(chromedp.CSS(".toolbar button.end")))
	b.wait("ended", `document.querySelector("#facts").textContent.includes("ended")`)
	b.shot("session-ended")
	if _, err := a.Session(ctx, sa.ID); apiError(err) == nil || apiError(err).Status != http.StatusGone {
		t.Errorf("the ended session: %v", err)
	}

	// An admin sees every tenant's sessions, and the metrics and audit.
	b.do("sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#signin")))
	b.signIn(s.URL, "admin-token")
	b.wait("B's session for the admin", `document.querySelector('tr[data-session="`+sb.ID+`"]') !== null`)
	b.do("metrics", chromedp.Navigate(s.URL+"/ui/#/metrics"))
	b.wait("a chart", `document.querySelector('[data-chart="Sandboxes alive"] path.series') !== null`)
	b.shot("metrics")
	b.do("audit", chromedp.Navigate(s.URL+"/ui/#/audit"))
	b.wait("audit records", `[...document.querySelectorAll("#audit-body td")].some(td => td.textContent === "session.end")`)
	b.shot("audit")
	b.checkClean()
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// waitFile waits for the browser to finish saving path (it writes a
// .crdownload first, renamed at the end) and returns its content.
func waitFile(t *testing.T, path string) []byte {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil {
			return b
		}
		if time.Now().After(deadline) {
			entries, _ := os.ReadDir(filepath.Dir(path))
			t.Fatalf("%s was never saved (the directory holds %v)", filepath.Base(path), entries)
		}
	}
}

// liveCode prints, then plots, then ends, each when the test says so
// (by a file in its workspace): the page is watched at each step.
const liveCode = `import os, time
def wait(v):
    while not (os.path.exists('/workspace/go') and open('/workspace/go').read() == v):
        time.sleep(0.05)
print('starting', flush=True)
wait('plot')
import matplotlib.pyplot as plt
from IPython.display import display
fig, ax = plt.subplots(); ax.plot([1, 4, 9, 16]); ax.set_title('live')
display(fig); plt.close(fig)
wait('end')
print('done')
`

// upload writes a file into a session's workspace (the test's signal to
// the code it runs).
func upload(t *testing.T, c *client.Client, id, name, content string) {
	t.Helper()
	if _, err := c.Upload(context.Background(), id, name, strings.NewReader(content), int64(len(content))); err != nil {
		t.Fatal(err)
	}
}

// checkClean fails the test if anything sandboxed code wrote acted in the
// page: a script ran (a console message or a global), a dialog opened, an
// element carries an event handler, or an iframe is not sandboxed without
// scripts.
func (b *tab) checkClean() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.console {
		if strings.Contains(m, "XSS") {
			b.t.Errorf("a payload ran: console %q", m)
		}
	}
	for _, d := range b.dialogs {
		if b.expect == "" || !strings.HasPrefix(d, b.expect) {
			b.t.Errorf("a payload opened a dialog: %q", d)
		}
	}
}

// xssPayload runs everywhere sandboxed code's text reaches the page.
const xssPayload = `<img src=x onerror="window.__xss=1;console.log('XSS img')"><script>window.__xss=2;console.log('XSS script')</script><svg onload="console.log('XSS svg')">`

// xssCode puts the payload in stdout, stderr, HTML and SVG outputs, a
// fake image, JSON, a file's name, an exception's name and value.
const xssCode = `import sys
from IPython.display import display
P = '''` + xssPayload + `'''
print(P); print(P, file=sys.stderr)
display({'text/html': P + '<a href="javascript:console.log(1)">x</a><meta http-equiv="refresh" content="0;url=javascript:console.log(2)">', 'text/plain': P}, raw=True)
display({'image/svg+xml': '<svg xmlns="http://www.w3.org/2000/svg" onload="console.log(\'XSS svg-onload\');alert(1)"><script>console.log("XSS svg-script");alert(2)</script><foreignObject width="100" height="100"><iframe xmlns="http://www.w3.org/1999/xhtml" src="javascript:console.log(\'XSS fo\')"></iframe><img xmlns="http://www.w3.org/1999/xhtml" src="x" onerror="console.log(\'XSS fo-img\')"/></foreignObject></svg>'}, raw=True)
display({'image/png': 'AAAA"><img src=x onerror="console.log(\'XSS png\')">'}, raw=True)
display({'application/json': {'k': P}}, raw=True)
open(P.replace('/', '_') + '.txt', 'w').write('x')
raise type(P, (Exception,), {})(P)
`

// A set of XSS payloads in everything the console shows: none runs in the
// console's origin or reads its key; HTML and SVG render in iframes
// sandboxed without scripts; the rest is text.
func TestConsoleXSS(t *testing.T) {
	s := keysServer(t, nil)
	ctx := context.Background()
	key := s.newKey("team-x")
	c := s.as(key)
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: xssCode}, nil)
	if err != nil || res.Error == nil || !strings.Contains(res.Error.Name, "onerror") {
		t.Fatalf("the payloads' execution: %+v %v", res, err)
	}
	// And one running, whose code's head the sessions list shows.
	go c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: "# " + xssPayload + "\nimport time; time.sleep(600)"}, nil)
	b := newTab(t)
	b.signIn(s.URL, key)
	b.wait("the running code's head", `[...document.querySelectorAll("#sessions code")].some(c => c.textContent.includes("onerror"))`)
	b.shot("xss-sessions")
	b.do("session page", chromedp.Navigate(s.URL+"/ui/#/session/"+sess.ID))
	b.wait("the payloads' cell", `document.querySelectorAll(".cell").length >= 2 && document.querySelectorAll(".cell iframe.rich").length === 2`)
	b.wait("the iframes' documents", `[...document.querySelectorAll(".cell iframe.rich")].every(f => f.srcdoc.length > 0)`)
	b.do("files", chromedp.Click(chromedp.CSS(`.tabs button[data-tab="Files"]`)))
	b.wait("the file's name", `[...document.querySelectorAll("#files-table a.file")].some(a => a.textContent.includes("onerror"))`)
	b.do("notebook tab", chromedp.Click(chromedp.CSS(`.tabs button[data-tab="Notebook"]`)))
	b.shot("xss-session")
	b.do("interrupt", chromedp.Click(chromedp.CSS(".toolbar button.interrupt")))
	b.wait("interrupted", `[...document.querySelectorAll(".cell pre.err")].some(p => p.textContent.includes("KeyboardInterrupt"))`)

	checks := map[string]string{
		"no payload set a global":                        `window.__xss === undefined`,
		"the key is where it was":                        `sessionStorage.getItem("airlock.key") === "` + key + `"`,
		"the page is the console still":                  `location.pathname === "/ui/" && document.title === "airlock console"`,
		"no element carries an event handler":            `document.querySelectorAll("[onerror],[onload],[onclick]").length === 0`,
		"no script but the console's":                    `[...document.scripts].every(s => s.src.endsWith("/ui/app.js"))`,
		"no image but the plots'":                        `[...document.images].every(i => i.classList.contains("rich") && i.src.startsWith("data:image/"))`,
		"the fake PNG is not an image":                   `![...document.images].some(i => i.src.includes("onerror"))`,
		"every iframe is sandboxed, without scripts":     `[...document.querySelectorAll("iframe")].every(f => f.getAttribute("sandbox") === "" && f.sandbox.length === 0)`,
		"the payloads are shown as text":                 `document.querySelector("#cells").textContent.includes("<script>window.__xss=2")`,
		"the exception's name is text":                   `[...document.querySelectorAll(".cell pre.err b")].some(b => b.textContent.includes("<img src=x"))`,
		"an iframe's document is not the console's":      `[...document.querySelectorAll("iframe")].every(f => { try { return f.contentDocument === null } catch (e) { return true } })`,
		"nothing is innerHTML: Trusted Types enforce it": `(() => { try { document.createElement("div").innerHTML = "<b>x</b>"; return false } catch (e) { return true } })()`,
	}
	for what, expr := range checks {
		if v := b.eval(expr); v != true {
			t.Errorf("%s: %s is %v", what, expr, v)
		}
	}
	b.checkClean()
}

// A server without authentication (loopback only) serves the console
// without a key, behind the same browser guard as the API.
func TestConsoleNoAuth(t *testing.T) {
	s := startServer(t, nil)
	id := s.newSession("bash", nil)
	b := newTab(t)
	b.do("open", chromedp.Navigate(s.URL+"/ui/"))
	b.wait("the session, no sign-in", `document.querySelector('tr[data-session="`+id+`"]') !== null`)
	if b.eval(`document.querySelector("#signin") === null && document.querySelector("#signout").hidden`) != true {
		t.Error("a server without authentication asked for a key")
	}
	// A DNS-rebinding page reaches the console under a foreign name.
	req, _ := http.NewRequest("GET", s.URL+"/ui/app.js", nil)
	req.Host = "evil.example:80"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("the console under a foreign Host: %d, want 403", resp.StatusCode)
	}
	b.checkClean()
}
