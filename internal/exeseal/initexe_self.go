//go:build !airlock_initexe

package exeseal

// embeddedInit is nil in a plain go build: the host re-executes itself.
var embeddedInit []byte
