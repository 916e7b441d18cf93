// Package fontcache builds, once per host, the matplotlib font list that
// every sandbox gets a copy of in /tmp: without it the first plot of each
// session scans every font (seconds) and fontconfig leaves caches behind.
//
// The list is computed by the same python and matplotlib sandboxes use,
// inside a jail; what comes back is only regular files named fontlist*
// that look like JSON, of bounded size, read through the workspace handle
// that never follows links. It must never run the runtime outside a jail
// or copy anything else out of one.
package fontcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"airlock/internal/config"
	"airlock/internal/jail"
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

// Ensure builds the font list when the host has none and shares it with
// the sandboxes h builds from now on; it reports whether it built one. A
// host without python or matplotlib has nothing to build: that is not an
// error (sessions still plot, only slower the first time).
func Ensure(ctx context.Context, h *jail.Host, cfg config.Config) (bool, error) {
	dir := Dir(cfg)
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		h.ShareTmp(Name, dir)
		return false, nil
	}
	if _, err := os.Stat(cfg.Runtimes.Python); err != nil {
		return false, nil
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return false, err
	}
	// Servers starting together each build their own copy and the first
	// rename wins; none sees a half-written directory.
	tmp, err := os.MkdirTemp(cfg.CacheDir, "."+Name+"-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return false, err
	}
	l := cfg.Defaults
	l.Timeout = config.Duration(120 * time.Second)
	l.CPUTime = config.Duration(120 * time.Second)
	var copied int
	var copyErr error
	slot, err := h.CLISlot()
	if err != nil {
		return false, err
	}
	res, err := h.RunWith(ctx, jail.RunRequest{
		Spec: jail.Spec{Name: "r-" + strconv.Itoa(os.Getpid()), Slot: slot, Limits: l},
		Argv: []string{cfg.Runtimes.Python, "-c", script},
		Env:  []string{"MPLCONFIGDIR=/tmp/mplbuild"},
	}, func(sb *jail.Sandbox, _ *jail.RunResult) {
		ents, _, err := sb.Workspace().List("mpl", false)
		if err != nil {
			return
		}
		for _, e := range ents {
			name := filepath.Base(e.Path)
			if e.Type != "file" || !strings.HasPrefix(name, "fontlist") {
				continue
			}
			f, _, err := sb.Workspace().Open(e.Path)
			if err != nil {
				continue
			}
			data, err := io.ReadAll(io.LimitReader(f, 64<<20))
			f.Close()
			if err != nil || !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
				continue
			}
			if copyErr = os.WriteFile(filepath.Join(tmp, name), data, 0o644); copyErr != nil {
				return
			}
			copied++
		}
	})
	if err != nil {
		return false, err
	}
	if res.ExitCode != 0 || res.Killed {
		// No matplotlib is a host without plots, not a broken one.
		if strings.Contains(string(res.Stderr), "No module named 'matplotlib'") {
			return false, nil
		}
		return false, fmt.Errorf("building the matplotlib font list: exit %d %s: %s", res.ExitCode, res.KillReason, lastLine(res.Stderr))
	}
	if copyErr != nil {
		return false, copyErr
	}
	if copied == 0 {
		return false, errors.New("building the matplotlib font list: matplotlib wrote none")
	}
	if err := os.Rename(tmp, dir); err != nil {
		if st, serr := os.Stat(dir); serr != nil || !st.IsDir() {
			return false, err
		}
	}
	h.ShareTmp(Name, dir)
	return true, nil
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}
