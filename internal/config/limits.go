package config

import (
	"errors"
	"fmt"
	"math"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// Limits bound one sandbox: the wire type, which the configuration's
// defaults and maximums use too.
type Limits = apitype.Limits

// DefaultLimits are used for every field a caller leaves unset.
func DefaultLimits() Limits {
	return Limits{
		Timeout:   Duration(30 * time.Second),
		CPUTime:   Duration(30 * time.Second),
		Memory:    512 << 20,
		Pids:      256,
		Disk:      256 << 20,
		Inodes:    65536,
		MaxOutput: 1 << 20,
		CPUs:      1,
		NoFile:    1024,
	}
}

// DefaultMaxLimits are the server's caps on what a client may ask for.
func DefaultMaxLimits() Limits {
	return Limits{
		Timeout:   Duration(15 * time.Minute),
		CPUTime:   Duration(30 * time.Minute),
		Memory:    8 << 30,
		Pids:      4096,
		Disk:      8 << 30,
		Inodes:    1 << 20,
		MaxOutput: 64 << 20,
		CPUs:      64,
		NoFile:    65536,
	}
}

// Floors below which a sandbox cannot even start its runtime.
// MinTimeout is the shortest timeout (and CPU time) of one execution or
// run a client may ask for.
const MinTimeout = Duration(time.Millisecond)

const (
	minMemory    = 16 << 20
	minDisk      = 1 << 20
	minPids      = 8
	minNoFile    = 32
	minInodes    = 64
	minCPUs      = 0.01
	minMaxOutput = 0
)

// Resolve fills unset fields of the requested limits from def and checks
// every field against max and against the floors a sandbox needs. The error
// names the field and the bound, so a client can correct its request.
func Resolve(req, def, max Limits) (Limits, error) {
	l := req.Merge(def)
	var errs []error
	check := func(name string, v, lo, hi float64, show func(float64) string) {
		switch {
		case math.IsNaN(v):
			// NaN compares false with both bounds; it must not pass as
			// within them (cpus is a float a caller can set to NaN).
			errs = append(errs, fmt.Errorf("%s is not a number", name))
		case v < lo:
			errs = append(errs, fmt.Errorf("%s %s is below the minimum %s", name, show(v), show(lo)))
		case v > hi:
			errs = append(errs, fmt.Errorf("%s %s exceeds the server maximum %s", name, show(v), show(hi)))
		}
	}
	sz := func(f float64) string { return Size(f).String() }
	dur := func(f float64) string { return Duration(f).String() }
	num := func(f float64) string { return fmt.Sprintf("%g", f) }
	check("timeout", float64(l.Timeout), float64(MinTimeout), float64(max.Timeout), dur)
	check("cpu_time", float64(l.CPUTime), float64(MinTimeout), float64(max.CPUTime), dur)
	check("memory", float64(l.Memory), minMemory, float64(max.Memory), sz)
	check("pids", float64(l.Pids), minPids, float64(max.Pids), num)
	check("disk", float64(l.Disk), minDisk, float64(max.Disk), sz)
	check("inodes", float64(l.Inodes), minInodes, float64(max.Inodes), num)
	check("max_output", float64(l.MaxOutput), minMaxOutput, float64(max.MaxOutput), sz)
	check("cpus", l.CPUs, minCPUs, max.CPUs, num)
	check("nofile", float64(l.NoFile), minNoFile, float64(max.NoFile), num)
	if err := errors.Join(errs...); err != nil {
		return Limits{}, fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	return l, nil
}

// ValidateLimits checks a complete set of limits (defaults or maximums)
// for internal consistency.
func ValidateLimits(l Limits) error {
	_, err := Resolve(l, l, l)
	return err
}
