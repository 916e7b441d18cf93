package jailinit

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fill sets every field v holds, recursively, to a value that is not
// its zero (slices get one element).
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(7)
	case reflect.String:
		v.SetString("x")
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fill(v.Field(i))
		}
	default:
		panic("fill: " + v.Kind().String())
	}
}

// A CloneMsg and the clone attributes it stands for map onto each other
// exactly, field by field: NewCloneMsg(m.Attr()) is m again for every
// field m may set, and every field of syscall.SysProcAttr is either
// carried there and back or refused, so that the spawner never clones
// with less than the server asked for (a field a new Go adds included).
func TestCloneMsg(t *testing.T) {
	pidfd := -1
	typ := reflect.TypeFor[CloneMsg]()
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if f.Name == "Env" || f.Name == "IntoFD" {
			continue // not attributes: the env is passed beside them, the cgroup is the spawner's
		}
		var m CloneMsg
		fill(reflect.ValueOf(&m).Elem().Field(i))
		attr := m.Attr()
		attr.PidFD = &pidfd
		got, err := NewCloneMsg(attr, nil)
		if err != nil {
			t.Errorf("%s: %v", f.Name, err)
			continue
		}
		if !reflect.DeepEqual(got, &m) {
			t.Errorf("%s: %+v comes back as %+v", f.Name, m, *got)
		}
	}
	env := []string{"A=1"}
	if m, err := NewCloneMsg(&syscall.SysProcAttr{PidFD: &pidfd}, env); err != nil || !reflect.DeepEqual(m.Env, env) {
		t.Errorf("the env is not carried: %v, %v", m, err)
	}

	// The spawner's own: the pidfd it returns and the cgroup it clones into.
	own := map[string]bool{"PidFD": true, "UseCgroupFD": true, "CgroupFD": true}
	atyp := reflect.TypeFor[syscall.SysProcAttr]()
	for i := 0; i < atyp.NumField(); i++ {
		f := atyp.Field(i)
		if own[f.Name] {
			continue
		}
		attr := &syscall.SysProcAttr{}
		fill(reflect.ValueOf(attr).Elem().Field(i))
		attr.PidFD = &pidfd
		m, err := NewCloneMsg(attr, nil)
		if err != nil {
			continue // refused
		}
		want := *attr
		want.PidFD = nil
		if got := m.Attr(); !reflect.DeepEqual(got, &want) {
			t.Errorf("%s: the spawner would clone with\n%+v\nnot\n%+v", f.Name, got, &want)
		}
	}

	full := func() *syscall.SysProcAttr {
		return &syscall.SysProcAttr{
			Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 100000, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 100000, Size: 1}},
			Credential:                 &syscall.Credential{Groups: []uint32{}},
			GidMappingsEnableSetgroups: true,
			Setsid:                     true,
			PidFD:                      &pidfd,
		}
	}
	for name, change := range map[string]func(*syscall.SysProcAttr){
		"none":          func(a *syscall.SysProcAttr) {},
		"cgroup":        func(a *syscall.SysProcAttr) { a.UseCgroupFD, a.CgroupFD = true, 9 },
		"pdeathsig":     func(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL },
		"chroot":        func(a *syscall.SysProcAttr) { a.Chroot = "/x" },
		"unshare":       func(a *syscall.SysProcAttr) { a.Unshareflags = syscall.CLONE_NEWNS },
		"ambient caps":  func(a *syscall.SysProcAttr) { a.AmbientCaps = []uintptr{1} },
		"no setgroups":  func(a *syscall.SysProcAttr) { a.Credential.NoSetGroups = true },
		"setpgid":       func(a *syscall.SysProcAttr) { a.Setpgid = true },
		"no pidfd":      func(a *syscall.SysProcAttr) { a.PidFD = nil },
		"setctty":       func(a *syscall.SysProcAttr) { a.Setctty = true },
		"empty mapping": func(a *syscall.SysProcAttr) { a.UidMappings = []syscall.SysProcIDMap{} },
	} {
		a := full()
		change(a)
		_, err := NewCloneMsg(a, nil)
		if carried := name == "none" || name == "cgroup"; carried != (err == nil) {
			t.Errorf("%s: carried %v, error %v", name, carried, err)
		}
	}
}

// The spawner finds a clone that failed before its exec by its name and
// parent whatever its state: it has told its failure when ForkExec
// returns, but may still be running its exit, not yet a zombie (a search
// for zombies alone left it to the server unreaped). A process named
// alike that is no pid namespace's init is not taken for one that made
// a pid namespace (a sandbox's process handed to the server may name
// itself anything).
func TestFailedChild(t *testing.T) {
	const mark = "airlock-ctest"
	exe := filepath.Join(t.TempDir(), mark)
	if err := os.Symlink("/bin/sleep", exe); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	pid := cmd.Process.Pid
	if got := failedChild(mark, os.Getpid(), false); got != pid {
		t.Errorf("a child still running was not found: %d, want %d", got, pid)
	}
	if got := failedChild(mark, os.Getpid(), true); got != 0 {
		t.Errorf("a child that is no pid namespace's init was taken for a failed clone's: %d", got)
	}
	if got := failedChild(mark, os.Getppid(), false); got != 0 {
		t.Errorf("another process's child was taken: %d", got)
	}
	if got := failedChild("airlock-cother", os.Getpid(), false); got != 0 {
		t.Errorf("a child of another name was taken: %d", got)
	}
	// A zombie, as it ends up.
	cmd.Process.Kill()
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if got := failedChild(mark, os.Getpid(), false); got != pid {
		t.Errorf("a zombie child was not found: %d, want %d", got, pid)
	}
}
