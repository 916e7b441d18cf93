package session

import (
	"context"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/instance"
	"airlock/internal/runtimes"
)

// ceilingSource gives memInstances that record, when checkpointed, what
// the manager has reserved: of the disk, and of the tenant's quota.
type ceilingSource struct {
	memSource
	m           *Manager
	disk, quota *int64
}

func (s ceilingSource) Get(ctx context.Context, rt runtimes.Runtime, l config.Limits, net bool) (Instance, error) {
	in, err := s.memSource.Get(ctx, rt, l, net)
	if err != nil {
		return nil, err
	}
	return ceilingInstance{in.(memInstance), s}, nil
}

type ceilingInstance struct {
	memInstance
	src ceilingSource
}

func (f ceilingInstance) Checkpoint(ctx context.Context, dir string, max int64) (instance.Checkpoint, error) {
	f.src.m.mu.Lock()
	*f.src.disk, *f.src.quota = f.src.m.reservedDiskLocked(), f.src.m.reserved[""]
	f.src.m.mu.Unlock()
	return f.memInstance.Checkpoint(ctx, dir, max)
}

// TestMemoryPauseReservesTheCeiling: while a pause that keeps the memory
// checkpoints, the disk reserved covers the largest checkpoint the
// sandbox may make (runsc writes it whole before its size is checked:
// memoryCeiling), and the tenant's quota only what the memory in use
// may take. checked against a mutant: with the disk reserved for the
// usage figure (as the quota), the disk reserved was 67 MiB for a
// ceiling of 608 MiB.
func TestMemoryPauseReservesTheCeiling(t *testing.T) {
	m, cfg, ms := newMemManager(t)
	var disk, quota int64
	m.sources[cfg.Isolation] = ceilingSource{ms, m, &disk, &quota}
	ctx := context.Background()
	s, err := m.Create(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, s, someFiles)
	ceiling := memoryCeiling(s.limits)
	info, err := m.PauseFor(ctx, s.ID(), apitype.RestoreMemory)
	if err != nil || info.Paused.MemoryBytes == 0 {
		t.Fatalf("a pause keeping the memory: %+v %v", info, err)
	}
	if ms.checkpoints.Load() != 1 {
		t.Fatalf("%d checkpoints", ms.checkpoints.Load())
	}
	if disk < ceiling {
		t.Errorf("the disk reserved while checkpointing: %d bytes, less than the ceiling %d", disk, ceiling)
	}
	if quota >= ceiling || quota <= 0 {
		t.Errorf("the quota reserved while checkpointing: %d bytes, want the usage figure, below the ceiling %d", quota, ceiling)
	}
	m.mu.Lock()
	left := m.reservedDiskLocked()
	m.mu.Unlock()
	if left != 0 {
		t.Errorf("%d bytes still reserved after the pause", left)
	}
	m.DeleteFor(ctx, s.ID())
}
