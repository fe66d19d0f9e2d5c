package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// BenchmarkConcurrencySlots enqueues a job that takes a slot of one of 100
// concurrency keys (whose rows the first hundred jobs create), claims it
// and finishes it, giving the slot back, one job at a time on each
// database: two semaphore locks per
// job (the enqueue's and the finish's), each one round trip on
// PostgreSQL and two on MySQL, with everything a job costs around them.
// Run with -count to interleave:
//
//	go test -run XXX -bench ConcurrencySlots -count 5 ./internal/engine/
func BenchmarkConcurrencySlots(b *testing.B) {
	for _, be := range testdb.Backends(b) {
		b.Run(be.Name, func(b *testing.B) {
			s := be.Open(b)
			ctx := context.Background()
			pid := register(b, s, t0)
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{slotted(fmt.Sprintf("acct/%d", i%100), 10)}); err != nil {
					b.Fatal(err)
				}
				res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 1, Clock: engine.At(t0)})
				if err != nil || len(res.Jobs) != 1 {
					b.Fatalf("claim: %v, %d jobs", err, len(res.Jobs))
				}
				run := runsOf(res.Jobs)
				if err := s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: run, SlotHolders: run}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
