package exeseal

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// stampPrefix starts the build stamp scripts/build.sh gives the host and
// the embedded init alike (-X): a SHA-256 of every source file both were
// compiled from, with the Go version and the flags.
const stampPrefix = "airlock-init-stamp:"

// initStamp is the stamp this binary was built with ("" for a plain go
// build, which embeds no init).
var initStamp string

// From names what the init runs: the running airlock binary, or the
// smaller init binary built into it.
const (
	FromSelf     = "the airlock binary"
	FromEmbedded = "the init built into the airlock binary"
)

// ErrStampMismatch says an embedded init was not built from this binary's
// sources: the host refuses it rather than build sandboxes with other
// code than its own.
var ErrStampMismatch = errors.New("the embedded sandbox init was not built from this binary's sources; rebuild with scripts/build.sh (or a plain go build ./cmd/airlock, which embeds none)")

// stampHash is the hash of a stamp of the form scripts/build.sh writes.
func stampHash(stamp string) (string, error) {
	hash, ok := strings.CutPrefix(stamp, stampPrefix)
	if !ok || len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%w (this binary has no build stamp)", ErrStampMismatch)
	}
	return hash, nil
}

// checkStamp accepts init only when it carries this build's stamp, and
// this build has one of the form scripts/build.sh writes.
func checkStamp(init []byte, stamp string) error {
	if _, err := stampHash(stamp); err != nil {
		return err
	}
	if !bytes.Contains(init, []byte(stamp)) {
		return ErrStampMismatch
	}
	return nil
}
