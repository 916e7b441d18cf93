package mcp

// Sweep runs the sweep of the sessions Adopt took in now, as its timer
// does after the grace.
func (s *Server) Sweep() { s.endOrphans() }
