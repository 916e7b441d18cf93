package jail

import (
	"fmt"
	"os"
	"time"
)

// tracing prints phase timings to stderr when AIRLOCK_TRACE is set; it is
// how the latency figures in docs/explanation/performance.md were broken down.
var tracing = os.Getenv("AIRLOCK_TRACE") != ""

var traceStart = time.Now()

func trace(what string) {
	if tracing {
		fmt.Fprintf(os.Stderr, "trace %8.3fms %s\n", float64(time.Since(traceStart).Microseconds())/1000, what)
	}
}

// Trace is trace for other packages.
func Trace(what string) { trace(what) }

func traceEnv() []string {
	if tracing {
		return []string{"AIRLOCK_TRACE=1"}
	}
	return nil
}
