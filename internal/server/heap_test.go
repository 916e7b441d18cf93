package server

import (
	"runtime"
	"runtime/metrics"
	"testing"
)

// heapGoal is the heap size at which the next collection is due.
func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestHeapFloor checks that the floor paces the collector while it is
// held, and stops when it is let go.
func TestHeapFloor(t *testing.T) {
	const n = 256 << 20 // never written: no memory behind it
	runtime.GC()
	if before := heapGoal(); before >= n {
		t.Fatalf("heap goal %d before the floor: the test needs a smaller heap", before)
	}
	release := floorHeap(n)
	runtime.GC()
	if g := heapGoal(); g < n {
		t.Errorf("heap goal %d with a floor of %d: the floor is not held", g, n)
	}
	release()
	runtime.GC()
	if g := heapGoal(); g >= n {
		t.Errorf("heap goal %d after the floor was let go", g)
	}
}
