package server

import (
	"context"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/client"
	"airlock/internal/config"
)

// BenchmarkWarmExecute is the bench's warm row in one process: `x = 1`
// in a warm Python session over HTTP (loopback TCP), the server composed
// as the bench's servers are (metrics on, the audit log off, the heap
// floor held), for
// profiles of one execution end to end:
//
//	atest ./internal/server -run '^$' -bench WarmExecute -benchmem \
//	    -cpuprofile cpu.prof -memprofile mem.prof
//
// Its allocations include the client's (the same in every run); the
// server's are its profile's share under net/http.(*conn).serve.
func BenchmarkWarmExecute(b *testing.B) {
	defer floorHeap(heapFloor)()
	s, _ := testServer(b, nil, func(c *config.Config) {
		c.Pool.Size = map[string]int{"python": 1}
		c.Pool.LeanSize = 0
		c.Pool.Zygote = true
		c.Audit.Enabled = false // as the bench's servers
	})
	ctx := context.Background()
	cl := client.New("http://" + s.Addr().String())
	defer cl.CloseIdleConnections()
	warm, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := cl.WaitWarm(warm); err != nil {
		b.Fatal(err)
	}
	info, err := cl.CreateSession(ctx, apitype.CreateSessionRequest{Language: apitype.Python})
	if err != nil {
		b.Fatal(err)
	}
	run := func() {
		res, err := cl.Execute(ctx, info.ID, apitype.ExecuteRequest{Code: "x = 1"}, nil)
		if err != nil || res.Error != nil || res.Killed {
			b.Fatalf("execute: %v %+v", err, res)
		}
	}
	for range 20 { // the connection and the interpreter warm
		run()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		run()
	}
	b.StopTimer()
	cl.DeleteSession(ctx, info.ID)
}
