package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// BenchmarkFinishBatch records batches of 1,000 results: completions,
// failures retried after a backoff (host clock), and completions with 1%
// of failures.
//
//	go test -run XXX -bench FinishBatch -benchtime 40x -count 5 ./internal/engine/
func BenchmarkFinishBatch(b *testing.B) {
	const n = 1000
	for _, be := range testdb.Backends(b) {
		b.Run(be.Name, func(b *testing.B) {
			s := be.Open(b)
			ctx := context.Background()
			pid := register(b, s, t0)
			for _, kind := range []string{"completed", "retried", "mixed"} {
				b.Run(kind, func(b *testing.B) {
					for range b.N {
						b.StopTimer()
						jobs := make([]engine.NewJob, n)
						for i := range jobs {
							jobs[i] = job("k", "default", 0)
						}
						if _, err := s.Enqueue(ctx, nil, engine.At(t0), jobs); err != nil {
							b.Fatal(err)
						}
						res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: n, Clock: engine.At(t0)})
						if err != nil || len(res.Jobs) != n {
							b.Fatalf("claim: %v, %d", err, len(res.Jobs))
						}
						var o engine.Outcomes
						for i, j := range res.Jobs {
							if kind == "completed" || kind == "mixed" && i%100 != 0 {
								o.Completed = append(o.Completed, j.Run())
							} else {
								o.Others = append(o.Others, engine.Transition{ID: j.ID, Claim: j.Claims, State: engine.StateScheduled, RunAt: t0.Add(time.Hour), Error: "upstream 503"})
							}
						}
						b.StartTimer()
						if err := s.Finish(ctx, pid, engine.At(t0), o); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}
