// Package fontcache owns the matplotlib font list, built once per host,
// that every sandbox gets a copy of in /tmp: without it the first plot of
// each session scans every font (seconds) and fontconfig leaves caches
// behind.
//
// The list is computed by the same python and matplotlib sandboxes use,
// inside a jail, by a one-shot program run its caller provides (the
// server's, on the session path every program takes); what comes back is
// only regular files named fontlist* that look like JSON, of bounded
// size, read through the workspace handle that never follows links. It
// must never run the runtime outside a jail or copy anything else out of
// one.
package fontcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
)

// Name is the directory under cache_dir and under each sandbox's /tmp.
const Name = "matplotlib"

// Dir is where the host keeps the font list.
func Dir(cfg config.Config) string { return filepath.Join(cfg.CacheDir, Name) }

const script = `import os
import matplotlib.font_manager
os.makedirs('/workspace/mpl', exist_ok=True)
for f in os.listdir(os.environ['MPLCONFIGDIR']):
    if f.startswith('fontlist'):
        open('/workspace/mpl/' + f, 'wb').write(open(os.path.join(os.environ['MPLCONFIGDIR'], f), 'rb').read())
`

// Runner runs a program once in a fresh sandbox and hands each file it
// wrote to sink before the sandbox goes (session.Manager.RunProgramTo).
type Runner func(ctx context.Context, req apitype.ProgramRequest, sink func(name string, open func() (io.ReadCloser, error))) (*apitype.OneShotResult, error)

// Ensure builds the font list with run when the host has none. It returns
// the directory every sandbox should get a copy of ("" when there is
// none) and whether it built it. A host without python or matplotlib has
// nothing to build: that is not an error (sessions still plot, only
// slower the first time).
func Ensure(ctx context.Context, cfg config.Config, run Runner) (string, bool, error) {
	dir := Dir(cfg)
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return dir, false, nil
	}
	if _, err := os.Stat(cfg.Runtimes.Python); err != nil {
		return "", false, nil
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return "", false, err
	}
	// Servers starting together each build their own copy and the first
	// rename wins; none sees a half-written directory.
	tmp, err := os.MkdirTemp(cfg.CacheDir, "."+Name+"-")
	if err != nil {
		return "", false, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", false, err
	}
	var copied int
	var copyErr error
	res, err := run(ctx, apitype.ProgramRequest{
		Language: apitype.Python,
		Code:     script,
		Env:      map[string]string{"MPLCONFIGDIR": "/tmp/mplbuild"},
		Limits:   Limits,
	}, func(path string, open func() (io.ReadCloser, error)) {
		name := filepath.Base(path)
		if copyErr != nil || filepath.Dir(path) != "mpl" || !strings.HasPrefix(name, "fontlist") {
			return
		}
		f, err := open()
		if err != nil {
			return
		}
		data, err := io.ReadAll(io.LimitReader(f, 64<<20))
		f.Close()
		if err != nil || !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
			return
		}
		if copyErr = os.WriteFile(filepath.Join(tmp, name), data, 0o644); copyErr == nil {
			copied++
		}
	})
	if err != nil {
		return "", false, err
	}
	if res.ExitCode != 0 || res.Killed {
		// No matplotlib is a host without plots, not a broken one.
		if strings.Contains(res.Stderr, "No module named 'matplotlib'") {
			return "", false, nil
		}
		return "", false, fmt.Errorf("building the matplotlib font list: exit %d %s: %s", res.ExitCode, res.KillReason, lastLine([]byte(res.Stderr)))
	}
	if copyErr != nil {
		return "", false, copyErr
	}
	if copied == 0 {
		return "", false, errors.New("building the matplotlib font list: matplotlib wrote none")
	}
	if err := os.Rename(tmp, dir); err != nil {
		if st, serr := os.Stat(dir); serr != nil || !st.IsDir() {
			return "", false, err
		}
	}
	return dir, true, nil
}

// Limits are what the run that builds the list may need (matplotlib
// scans every font of the host once).
var Limits = apitype.Limits{Timeout: apitype.Duration(120 * time.Second), CPUTime: apitype.Duration(120 * time.Second)}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}
