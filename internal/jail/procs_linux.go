package jail

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// ChildrenOf lists the processes whose parent is parent now, zombies
// included, as /proc shows them. Each may end, be reaped and its pid be
// reused as it is read: take a pidfd of one, then check ParentOf again,
// before acting on it.
func ChildrenOf(parent int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && ParentOf(pid) == parent {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ParentOf is the pid of process pid's parent, or 0 if it cannot be read
// (it is gone).
func ParentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold anything, even ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
