package jail

import (
	"context"
	"syscall"
	"testing"
	"time"
)

func cpuNow() time.Duration {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + kids.Utime.Nano() + kids.Stime.Nano())
}

// BenchmarkStartClose measures building and tearing down an empty jail,
// in wall time and in CPU time (this process and its children).
func BenchmarkStartClose(b *testing.B) {
	h := testHost(b)
	c0 := cpuNow()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sb, err := h.Start(context.Background(), testSpec(testLimits()))
		if err != nil {
			b.Fatal(err)
		}
		sb.Close()
	}
	b.ReportMetric(float64(cpuNow()-c0)/float64(b.N)/1e6, "cpu-ms/op")
}
