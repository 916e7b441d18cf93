package image

import (
	"bufio"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
)

//go:embed debian-root.sh
var debianRoot string

// Recipes are named package lists `airlock template build --recipe`
// knows. code-interpreter is what agent code reaches for (E2B's
// code-interpreter template has about the same): the scientific Python
// stack, HTTP and HTML, spreadsheets, plots, IPython; Node.js with a few
// common modules; the command-line tools scripts call.
var Recipes = map[string][]string{
	"code-interpreter": {
		"python3", "python3-numpy", "python3-pandas", "python3-matplotlib", "python3-scipy",
		"python3-sklearn", "python3-seaborn", "python3-requests", "python3-bs4", "python3-lxml",
		"python3-openpyxl", "python3-xlsxwriter", "python3-pil", "python3-sympy", "python3-statsmodels",
		"python3-networkx", "python3-plotly", "python3-tabulate", "python3-ipython",
		"nodejs", "node-lodash", "node-axios", "node-yargs",
		"bash", "coreutils", "ca-certificates", "fonts-dejavu-core",
		"curl", "git", "jq", "sqlite3", "unzip",
	},
	// python is the smallest root that runs airlock's Python runtime.
	"python": {"python3", "bash", "ca-certificates"},
}

// CheckPackages checks Debian package names (lower-case letters, digits,
// '+', '-', '.', starting with a letter or digit).
func CheckPackages(pkgs []string) error {
	if len(pkgs) == 0 || len(pkgs) > 1000 {
		return fmt.Errorf("%w: give 1 to 1000 Debian packages", errdefs.ErrInvalidArgument)
	}
	for _, p := range pkgs {
		ok := len(p) >= 2 && len(p) <= 100
		for i := 0; ok && i < len(p); i++ {
			c := p[i]
			ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '+' || c == '-' || c == '.')
		}
		if !ok {
			return fmt.Errorf("%w: %q is not a Debian package name", errdefs.ErrInvalidArgument, trimName(p))
		}
	}
	return nil
}

// DebianKey is the cache key of a Debian root of pkgs: the script, the
// sorted package list and the mirrors.
func DebianKey(pkgs []string) string {
	sorted := slices.Clone(pkgs)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%q\x00%s %s", debianRoot, sorted, os.Getenv("DEBIAN_MIRROR"), os.Getenv("DEBIAN_SECURITY_MIRROR"))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// BuildDebian returns a Debian 12 root with pkgs installed, from the
// cache under cacheDir or built there now with debootstrap (minutes; as
// root). A build goes into a temporary directory renamed at the end: an
// interrupted one (ctx) leaves nothing. Concurrent builds of one key wait
// for each other.
func BuildDebian(ctx context.Context, cacheDir string, pkgs []string, progress func(Event)) (string, error) {
	if err := CheckPackages(pkgs); err != nil {
		return "", err
	}
	if progress == nil {
		progress = func(Event) {}
	}
	key := DebianKey(pkgs)
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("%w: template cache: %v", errdefs.ErrUnavailable, err)
	}
	root := filepath.Join(cacheDir, key)
	lock, err := os.OpenFile(root+".lock", os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return "", fmt.Errorf("%w: template cache: %v", errdefs.ErrUnavailable, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", err
	}
	if st, err := os.Lstat(filepath.Join(root, "usr")); err == nil && st.IsDir() {
		progress(Event{Stage: "cached", Message: key})
		return root, nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		if _, err2 := os.Stat("/usr/sbin/debootstrap"); err2 != nil {
			return "", fmt.Errorf("%w: debootstrap is not installed (apt-get install debootstrap)", errdefs.ErrUnavailable)
		}
	}
	// What a killed build of this key left (nobody else builds it: the
	// lock is ours).
	os.RemoveAll(root)
	if old, _ := filepath.Glob(filepath.Join(cacheDir, ".build-"+key+"-*")); len(old) > 0 {
		for _, d := range old {
			os.RemoveAll(d)
		}
	}
	tmp, err := os.MkdirTemp(cacheDir, ".build-"+key+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	script := filepath.Join(tmp, "debian-root.sh")
	if err := os.WriteFile(script, []byte(debianRoot), 0o700); err != nil {
		return "", err
	}
	dir := filepath.Join(tmp, "rootfs")
	cmd := exec.Command("/bin/sh", append([]string{script, dir}, pkgs...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_MIRROR=" + os.Getenv("DEBIAN_MIRROR"), "DEBIAN_SECURITY_MIRROR=" + os.Getenv("DEBIAN_SECURITY_MIRROR")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stderr = &capped{b: &stderr, max: 8 << 10}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	// Interrupted: the whole build's process group goes (debootstrap,
	// apt and dpkg under chroot), then its directory.
	stop := context.AfterFunc(ctx, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if stage, ok := strings.CutPrefix(sc.Text(), "stage: "); ok {
			name, msg, _ := strings.Cut(stage, " ")
			progress(Event{Stage: name, Message: msg})
		}
	}
	err = cmd.Wait()
	stop()
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	if err != nil {
		return "", fmt.Errorf("%w: building the Debian root failed: %v: %s", errdefs.ErrUnavailable, err, strings.TrimSpace(stderr.String()))
	}
	if err := os.Rename(dir, root); err != nil {
		return "", err
	}
	return root, nil
}

type capped struct {
	b   *strings.Builder
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// Build builds a Debian root of pkgs (cached in cacheDir) and imports it
// as a new version of the template name.
func (s *Store) Build(ctx context.Context, name, cacheDir string, pkgs []string, o ImportOptions) (Template, error) {
	if err := CheckName(name); err != nil {
		return Template{}, err
	}
	root, err := BuildDebian(ctx, cacheDir, pkgs, o.Progress)
	if err != nil {
		return Template{}, err
	}
	o.as = &Template{Source: "debian", From: "bookworm", Digest: DebianKey(pkgs), Packages: slices.Clone(pkgs)}
	return s.Import(ctx, name, root, o)
}
