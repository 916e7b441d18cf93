// Command airlock-init is the sandbox init alone: package jailinit and
// the mechanisms it applies, without the server's packages, so that
// every sandbox's init starts faster and holds less memory than the
// whole airlock binary re-executed. scripts/build.sh builds it and embeds
// it in the airlock binary (package exeseal), both with one build stamp;
// it is never installed or started on its own. Its work is done by
// jailinit's initialiser, when airlock starts it as an init or spawner.
// It must never import more than jailinit: whatever it links, every
// sandbox pays for.
package main

import (
	"fmt"
	"os"

	_ "airlock/internal/jailinit"
)

// stamp is the build stamp scripts/build.sh gives this binary and the
// airlock binary it is embedded in (see package exeseal).
var stamp string

func main() {
	fmt.Fprintf(os.Stderr, "airlock-init (%s): the sandbox init built into airlock; airlock starts it, nothing else does\n", stamp)
	os.Exit(2)
}
