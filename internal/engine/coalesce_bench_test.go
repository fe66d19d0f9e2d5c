package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// BenchmarkCoalescingCalls enqueues one coalescing call at a time on one
// of 100 keys: the first call of a key creates its pending job, the next
// nine join it, and after every thousand calls a claim takes the hundred
// jobs, so that each key's next call creates a new one. It measures what a call costs on each
// database (on MySQL the key row, the plain read and the lock through the
// primary key; elsewhere the locking read through the coalesce index).
// Run with -count to interleave:
//
//	go test -run XXX -bench CoalescingCalls -count 5 ./internal/engine/
func BenchmarkCoalescingCalls(b *testing.B) {
	for _, be := range testdb.Backends(b) {
		b.Run(be.Name, func(b *testing.B) {
			s := be.Open(b)
			ctx := context.Background()
			pid := register(b, s, t0)
			b.ResetTimer()
			for i := range b.N {
				j := job("k", "default", 0)
				j.Coalesce = &engine.Coalesce{Key: fmt.Sprintf("co/%d", i%100), Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard}}
				if _, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{j}); err != nil {
					b.Fatal(err)
				}
				if i%1000 == 999 {
					// Every key's job has had ten calls: claim and finish them.
					res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 100, Clock: engine.At(t0)})
					if err != nil {
						b.Fatal(err)
					}
					if err := s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runsOf(res.Jobs)}); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
