package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuSnap is the CPU time used so far by each party of a one-shot:
// the server's own threads; its spawner, which clones the inits; the
// sandbox inits it has reaped (each init's
// whole life, namespaces and mounts included, counted when it ends);
// the Python template's own (its forks) and the runtimes it has reaped
// (forked children, their exit included); the bench client; and the
// host as a whole (/proc/stat), whose remainder is kernel workers (a
// network namespace's cleanup runs in one) and anything else running.
type cpuSnap struct {
	server, spawner, inits, template, runtimes, client, host time.Duration
}

// clockTick is USER_HZ, 100 on every Linux /proc/<pid>/stat reports in.
const clockTick = 10 * time.Millisecond

// procCPU reads a process's own and reaped children's CPU time.
func procCPU(pid int) (self, children time.Duration) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	s := string(b)
	// The fields after the command, which may hold spaces and parens.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return 0, 0
	}
	n := func(k int) time.Duration { v, _ := strconv.ParseInt(f[k], 10, 64); return time.Duration(v) * clockTick }
	// Fields 14-17 of stat (utime, stime, cutime, cstime) are 11-14 here.
	return n(11) + n(12), n(13) + n(14)
}

// hostBusy is the CPU time all cores spent not idle.
func hostBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	var busy int64
	for k, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if k != 3 && k != 4 && k < 8 { // idle and iowait; guest time is in user already
			busy += n
		}
	}
	return time.Duration(busy) * clockTick
}

// templatePids finds the Python templates of server name (the full one,
// and the lean one beside it): the oldest python3 of each template
// cgroup (children forked from it are there for a moment only).
func templatePids(name string) []int {
	for _, root := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		ents, err := os.ReadDir(filepath.Join(root, name))
		if err != nil {
			continue
		}
		var out []int
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), "zygote-python") {
				continue
			}
			best := 0
			for _, pid := range cgroupPids(name, e.Name()) {
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				if strings.HasPrefix(string(comm), "python") && (best == 0 || pid < best) {
					best = pid
				}
			}
			if best > 0 {
				out = append(out, best)
			}
		}
		return out
	}
	return nil
}

// parties is the CPU of every party of a one-shot together (the host's
// remainder not included).
func (c cpuSnap) parties() time.Duration {
	return c.server + c.spawner + c.inits + c.template + c.runtimes + c.client
}

func (s *server) cpu() cpuSnap {
	var c cpuSnap
	c.server, c.inits = procCPU(s.cmd.Process.Pid)
	if pid := spawnerPid(s.cmd.Process.Pid); pid > 0 {
		c.spawner, _ = procCPU(pid)
	}
	for _, pid := range templatePids(s.name) {
		self, children := procCPU(pid)
		c.template += self
		c.runtimes += children
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c.host = hostBusy()
	return c
}

// spawnerArg0 is jailinit.SpawnerArg0 (the bench, a tool, may not import
// the jail's packages).
const spawnerArg0 = "airlock-spawner"

// spawnerPid finds the spawner among the children of the server pid (0
// when there is none).
func spawnerPid(pid int) int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		for _, c := range strings.Fields(string(b)) {
			argv, _ := os.ReadFile("/proc/" + c + "/cmdline")
			if arg0, _, _ := strings.Cut(string(argv), "\x00"); arg0 == spawnerArg0 {
				n, _ := strconv.Atoi(c)
				return n
			}
		}
	}
	return 0
}

// childrenCPU is the CPU time of this process's reaped children (the
// baselines it ran).
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perRun is d per run in milliseconds.
func perRun(d time.Duration, n int) float64 {
	return float64(d.Microseconds()) / 1000 / float64(max(n, 1))
}
