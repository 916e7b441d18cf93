//go:build airlock_initexe

package exeseal

import _ "embed"

// embeddedInit is cmd/airlock-init, built by scripts/build.sh from the
// same sources just before this binary (the file is a build output, never
// committed).
//
//go:embed airlock-init
var embeddedInit []byte
