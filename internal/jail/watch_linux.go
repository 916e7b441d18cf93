package jail

import "time"

// PollPids covers cgroup v1's missing pids notifications while a watch
// runs (see cgroup.Cgroup.PollPids); with it, a Sandbox is a
// watch.Sandbox.
func (s *Sandbox) PollPids() time.Duration { return s.cg.PollPids() }
