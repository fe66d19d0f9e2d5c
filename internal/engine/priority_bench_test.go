package engine_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// BenchmarkPriorityInsideALimit measures what priority inside a rate limit
// costs: 10,000 jobs arrive on one budget (100 a second, burst 10, a 10s
// horizon) ten times faster than it drains, so a backlog of thousands
// builds up, slotted and parked; a dispatcher and a worker drain it on the
// fake clock. "one" gives every job priority 1; "mixed" gives 10% priority
// 0, 30% priority 1 and 60% priority 2. It reports row moves per admitted
// job (promotions, deferrals, displacements, unparks and the admission
// itself), slot look-ups per admitted job, and how long (fake time) the
// jobs of each priority waited. Run it once:
//
//	go test ./internal/engine -run '^$' -bench PriorityInsideALimit -benchtime 1x
func BenchmarkPriorityInsideALimit(b *testing.B) {
	const jobs, arrivals, step = 10_000, 100, 110 * time.Millisecond
	for _, backend := range testdb.Backends(b) {
		for _, mix := range []string{"one", "mixed"} {
			b.Run(backend.Name+"/"+mix, func(b *testing.B) {
				var moves, lookups, admitted float64
				waits := map[int][]time.Duration{}
				for i := 0; i < b.N; i++ {
					s := backend.Open(b)
					rs, rec := testdb.Record(s)
					lim := limits{"k": spec(b, "k", 100, time.Second, 10)}
					r := rand.New(rand.NewPCG(1, uint64(i)))
					d := &drainer{t: b, s: rs, pid: register(b, s, t0), lim: lim, horizon: 10 * time.Second, now: t0}
					prio := map[int64]int{}
					enqueued := map[int64]time.Time{}
					for len(d.order) < jobs {
						if len(prio) < jobs {
							batch := make([]engine.NewJob, arrivals)
							for k := range batch {
								p := 1
								if mix == "mixed" {
									p = []int{0, 1, 1, 1, 2, 2, 2, 2, 2, 2}[r.IntN(10)]
								}
								batch[k] = prioritized(p)
							}
							for k, id := range enqueue(b, s, d.now, batch...) {
								prio[id], enqueued[id] = batch[k].Priority, d.now
							}
						}
						d.step(step)
					}
					for k, id := range d.order {
						waits[prio[id]] = append(waits[prio[id]], d.times[k].Sub(enqueued[id]))
					}
					for _, q := range rec.Take() {
						if strings.Contains(q, "j.priority > ") {
							lookups++
						}
					}
					b.Logf("admitted, deferred, displaced, claim-unparked, promoted, unparked: %v", d.by)
					moves += float64(d.moves)
					admitted += float64(len(d.order))
				}
				b.ReportMetric(moves/admitted, "moves/job")
				b.ReportMetric(lookups/admitted, "lookups/job")
				for p, w := range waits {
					slices.Sort(w)
					b.Logf("priority %d: %d jobs, wait median %s, p99 %s, max %s", p, len(w), w[len(w)/2], w[len(w)*99/100], w[len(w)-1])
				}
			})
		}
	}
}
