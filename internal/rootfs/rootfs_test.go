package rootfs

import (
	"slices"
	"strings"
	"testing"
)

func validSpec() Spec {
	s := DefaultSpec("/run/airlock/root", "sandbox")
	s.Disk, s.Inodes, s.Shm = 64<<20, 1024, 64<<20
	s.Files = map[string]string{"/opt/airlock/python/runtime.py": "print()"}
	s.TmpCopy = map[string]string{"matplotlib": "/var/cache/airlock/matplotlib"}
	return s
}

func TestValidateAcceptsTheDefaultLayout(t *testing.T) {
	if err := validSpec().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateRejects(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*Spec)
	}{
		{"empty staging", func(s *Spec) { s.Staging = "" }},
		{"relative staging", func(s *Spec) { s.Staging = "run/root" }},
		{"root staging", func(s *Spec) { s.Staging = "/" }},
		{"dotdot staging", func(s *Spec) { s.Staging = "/run/../etc" }},
		{"dot staging", func(s *Spec) { s.Staging = "/run/./root" }},
		{"double slash staging", func(s *Spec) { s.Staging = "/run//root" }},
		{"NUL staging", func(s *Spec) { s.Staging = "/run/root\x00" }},
		{"etc escape", func(s *Spec) { s.Etc["../shadow"] = "x" }},
		{"etc absolute", func(s *Spec) { s.Etc["/etc/shadow"] = "x" }},
		{"etc nested escape", func(s *Spec) { s.Etc["a/../../b"] = "x" }},
		{"etc empty name", func(s *Spec) { s.Etc[""] = "x" }},
		{"etc NUL", func(s *Spec) { s.Etc["pass\x00wd"] = "x" }},
		{"etc copy escape", func(s *Spec) { s.EtcCopy = append(s.EtcCopy, "../root/.ssh/id_rsa") }},
		{"etc copy absolute", func(s *Spec) { s.EtcCopy = append(s.EtcCopy, "/etc/shadow") }},
		{"etc bind escape", func(s *Spec) { s.EtcBind = append(s.EtcBind, "..") }},
		{"etc bind dotdot inside", func(s *Spec) { s.EtcBind = append(s.EtcBind, "ssl/../../root") }},
		{"file outside /opt", func(s *Spec) { s.Files["/etc/passwd"] = "x" }},
		{"file /opt itself", func(s *Spec) { s.Files["/opt"] = "x" }},
		{"file escaping /opt", func(s *Spec) { s.Files["/opt/../etc/passwd"] = "x" }},
		{"file relative", func(s *Spec) { s.Files["opt/x"] = "x" }},
		{"file /optx", func(s *Spec) { s.Files["/optx/y"] = "x" }},
		{"tmp copy name escape", func(s *Spec) { s.TmpCopy["../x"] = "/var/cache" }},
		{"tmp copy name absolute", func(s *Spec) { s.TmpCopy["/x"] = "/var/cache" }},
		{"tmp copy relative source", func(s *Spec) { s.TmpCopy["x"] = "var/cache" }},
		{"tmp copy unclean source", func(s *Spec) { s.TmpCopy["x"] = "/var/../root" }},
		{"zero disk", func(s *Spec) { s.Disk = 0 }},
		{"negative disk", func(s *Spec) { s.Disk = -1 }},
		{"zero inodes", func(s *Spec) { s.Inodes = 0 }},
		{"zero shm", func(s *Spec) { s.Shm = 0 }},
	} {
		s := validSpec()
		// Fresh maps: the changes must not leak between cases.
		s.Etc = GeneratedEtc("sandbox")
		s.Files = map[string]string{}
		s.TmpCopy = map[string]string{}
		s.EtcCopy = slices.Clone(s.EtcCopy)
		s.EtcBind = slices.Clone(s.EtcBind)
		c.change(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: Validate accepted it", c.name)
		}
	}
}

func TestGeneratedEtc(t *testing.T) {
	etc := GeneratedEtc("box-1")
	if etc["hostname"] != "box-1\n" || !strings.Contains(etc["hosts"], "127.0.1.1\tbox-1\n") {
		t.Errorf("hostname not used: %q %q", etc["hostname"], etc["hosts"])
	}
	// The sandbox user, and no host user, with /workspace as home.
	if !strings.Contains(etc["passwd"], "user:x:1000:1000:sandbox user:/workspace:/bin/bash\n") {
		t.Errorf("passwd: %q", etc["passwd"])
	}
	if n := strings.Count(etc["passwd"], "\n"); n != 3 {
		t.Errorf("passwd has %d entries, want root, user and nobody", n)
	}
	// No resolver: the sandbox has loopback only.
	if strings.Contains(etc["resolv.conf"], "nameserver") {
		t.Errorf("resolv.conf names a server: %q", etc["resolv.conf"])
	}
	for _, secret := range []string{"shadow", "gshadow", "sudoers", "ssh", "machine-id"} {
		if _, ok := etc[secret]; ok {
			t.Errorf("generated /etc has %s", secret)
		}
	}
	s := validSpec()
	for _, name := range append(slices.Clone(s.EtcCopy), s.EtcBind...) {
		for _, secret := range []string{"shadow", "sudoers", "ssh", "passwd", "group", "machine-id", "hostname"} {
			if strings.Contains(name, secret) {
				t.Errorf("host /etc/%s is copied or bound into every sandbox", name)
			}
		}
	}
}

func TestMaskAndDeviceLists(t *testing.T) {
	// Only harmless device nodes: never memory, ports, terminals, disks.
	allowed := map[string]bool{"null": true, "zero": true, "full": true, "random": true, "urandom": true}
	for _, d := range Devices {
		if !allowed[d] {
			t.Errorf("device %s is bound into every sandbox", d)
		}
	}
	for _, list := range [][]string{MaskedFiles, MaskedDirs, ReadOnlyProc, Devices} {
		for _, name := range list {
			if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
				t.Errorf("bad entry %q", name)
			}
		}
	}
	for _, must := range []string{"kcore", "kallsyms", "sysrq-trigger", "keys"} {
		if !slices.Contains(MaskedFiles, must) {
			t.Errorf("/proc/%s is not masked", must)
		}
	}
	if !slices.Contains(ReadOnlyProc, "sys") {
		t.Error("/proc/sys is not read-only")
	}
}
