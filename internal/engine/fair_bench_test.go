package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// BenchmarkClaimFairVsPlain claims and deletes 20,000 ready jobs in claims
// of 500, plain and fair (over 100 keys), on each database: the claim's
// cost alone, without handlers. Run with -count to interleave:
//
//	go test -run XXX -bench ClaimFairVsPlain -benchtime 1x -count 5 ./internal/engine/
func BenchmarkClaimFairVsPlain(b *testing.B) {
	const n, batch = 20000, 500
	for _, be := range testdb.Backends(b) {
		b.Run(be.Name, func(b *testing.B) {
			s := be.Open(b)
			ctx := context.Background()
			pid := register(b, s, t0)
			for _, fair := range []bool{false, true} {
				b.Run(fmt.Sprintf("fair=%v", fair), func(b *testing.B) {
					for range b.N {
						b.StopTimer()
						jobs := make([]engine.NewJob, n)
						for i := range jobs {
							jobs[i] = job("k", "default", 0)
							if fair {
								jobs[i].FairKey = fmt.Sprint(i % 100)
							}
						}
						for i := 0; i < n; i += 5000 {
							if _, err := s.Enqueue(ctx, nil, engine.At(t0), jobs[i:i+5000]); err != nil {
								b.Fatal(err)
							}
						}
						if be.Name == "postgres" {
							if _, err := s.DB().Exec(ctx, "ANALYZE sluice_jobs"); err != nil {
								b.Fatal(err)
							}
						}
						b.StartTimer()
						began := time.Now()
						for done := 0; done < n; {
							res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: batch, Clock: engine.At(t0), Fair: fair})
							if err != nil {
								b.Fatal(err)
							}
							ids := make([]int64, len(res.Jobs))
							for i, j := range res.Jobs {
								ids[i] = j.ID
							}
							q, args := s.SQL().DeleteJobsByID(ids)
							if _, err := s.DB().Exec(ctx, q, args...); err != nil {
								b.Fatal(err)
							}
							done += len(ids)
						}
						b.ReportMetric(float64(n)/time.Since(began).Seconds(), "jobs/s")
					}
				})
			}
		})
	}
}
