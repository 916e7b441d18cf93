// Package layers owns the rules of airlock's code layout, as tests that
// fail when they break: the table of which package may import which (the
// request path top to bottom, cmd/airlock → server → api and mcp →
// session → pool → instance → jail → mechanisms, with apitype, errdefs
// and config beneath them all), the form of every package's doc (one
// comment, "Package X owns …", saying what it must never do), that
// no test's goroutine reports to its T (one that outlives its test
// panics, and takes the package's other tests with it), and that no
// package the binaries link compiles a pattern while it is initialised
// (every start of the binary would pay for it).
//
// It must never hold code the binary uses: it is its tests, and this
// comment.
package layers
