package runtimes

// RootFiles are the session runtimes, placed read-only under RuntimeDir in
// every sandbox (path -> content).
func RootFiles() map[string]string {
	return rootFiles
}

var rootFiles = map[string]string{}
