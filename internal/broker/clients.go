package broker

import (
	_ "embed"
)

// The in-sandbox clients. They come from airlock (never from a
// template's root), placed read-only in every sandbox with the
// runtimes; without tools they say the session has none.
var (
	//go:embed client/airlock_tools.py
	clientPython string
	//go:embed client/airlock_tools.js
	clientJS string
	//go:embed client/airlock-tool
	clientCLI string
)

// Where the clients live in a sandbox: Python finds airlock_tools in its
// runtimes' directory (on sys.path in sessions, PYTHONPATH in their
// programs), node through NODE_PATH, the command through PATH.
const (
	PythonDir = "/opt/airlock/python"
	NodeDir   = "/opt/airlock/node"
	BinDir    = "/opt/airlock/bin"
)

// ContextEnv names the variable that tells the clients which code
// context they run in; they send it as ContextHeader, and a call's
// record says it came from there (advisory: code can send any context
// of its own session).
const (
	ContextEnv    = "AIRLOCK_CONTEXT"
	ContextHeader = "X-Airlock-Context"
)

// ClientFiles are the clients, by their path in a sandbox.
func ClientFiles() map[string]string {
	return map[string]string{
		PythonDir + "/airlock_tools.py": clientPython,
		NodeDir + "/airlock_tools.js":   clientJS,
		BinDir + "/airlock-tool":        clientCLI,
	}
}
