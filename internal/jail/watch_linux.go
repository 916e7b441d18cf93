package jail

// PollPids covers cgroup v1's missing pids notifications while a watch
// runs (see cgroup.Cgroup.PollPids); with it, a Sandbox is a
// watch.Sandbox.
func (s *Sandbox) PollPids(stop <-chan struct{}) { s.cg.PollPids(stop) }
