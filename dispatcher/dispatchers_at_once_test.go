package dispatcher_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// docs/operations.md: "Run one or more [dispatchers]; each job is promoted
// once and each tick runs once", and the Invariants (DESIGN.md): every
// job in one state, a budget admits at most To in any window of Per
// "whatever the number of processes", every waiting job has a future
// event that moves it, a semaphore's holders counted exactly.
//
// Three dispatchers, each on its own connection pool, run their rounds at
// once, with every clean-up due every second (idle budgets and fairness
// keys pruned, finished jobs deleted one second after they finish, slots
// maintained), while two claimers on pools of their own claim and complete
// jobs and an enqueuer adds delayed, rate-limited (parking on a short
// horizon), concurrency-limited and fair jobs. Each step of the fake clock
// checks that no call failed (no deadlock reached a caller), that no job
// was claimed twice, that no window of the budget held more than To, that
// each semaphore counts its holders exactly and never more than To, and
// that each budget's parked count covers its parked jobs; at the end,
// every job ran, exactly once.
func TestThreeDispatchersCleaningUpWhileClaimsRunKeepEveryPromise(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		p, burst, err := ratelimit.NewParams(3, 10*time.Second, 1)
		require.NoError(t, err)
		lim := oneLimit{ratelimit.Spec{Scope: "k", To: 3, Per: 10 * time.Second, Burst: burst, Params: p}}
		const horizon = 5 * time.Second // a short horizon: jobs park, and are unparked
		var ds []*dispatcher.Dispatcher
		for range 3 {
			ds = append(ds, newDispatcher(t, open(), dispatcher.Config{Clock: c, Logger: quiet(), BatchSize: 7, Horizon: horizon,
				Maintenance: dispatcher.Maintenance{Retention: time.Second,
					ClearIdleBudgets:  dispatcher.MaintenanceTask{Schedule: "@every 1s"},
					ClearFinishedJobs: dispatcher.MaintenanceTask{Schedule: "@every 1s"}}}))
		}
		type claimer struct {
			s   *engine.Store
			pid int64
		}
		var cs []claimer
		for range 2 {
			cs = append(cs, claimer{s: open()})
		}
		for i := range cs {
			cs[i].pid, err = cs[i].s.RegisterProcess(ctx, engine.Process{Kind: "worker", Name: "claimer"}, engine.At(t0))
			require.NoError(t, err)
		}
		enq := open()

		var mu sync.Mutex
		enqueued := map[int64]string{} // job → what it is
		claimed := map[int64]int{}
		var admitted []time.Time // admissions on the budgets, by key below
		admittedBy := map[string][]time.Time{}
		n, maxParked, unparked, promoted := 0, 0, 0, 0
		add := func(now time.Time) error {
			var js []engine.NewJob
			for i := range 3 {
				n++
				j := engine.NewJob{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1, Priority: n % 3}
				switch i {
				case 0: // rate-limited, on one of two budgets
					j.RateKeys = []engine.RateKey{{Key: fmt.Sprintf("k/%d", n%2), Cost: 1}}
				case 1: // delayed, one slot per key
					j.RunAt = now.Add(time.Duration(n%4) * time.Second)
					j.Conc = &engine.Conc{Key: fmt.Sprintf("c/%d", n%2), To: 1, Duration: time.Hour}
				default: // fair, some delayed
					j.FairKey = fmt.Sprintf("f/%d", n%3)
					if n%2 == 0 {
						j.RunAt = now.Add(2 * time.Second)
					}
				}
				js = append(js, j)
			}
			res, err := enq.Enqueue(ctx, nil, engine.At(now), js)
			if err != nil {
				return err
			}
			mu.Lock()
			for i, r := range res {
				enqueued[r.ID] = fmt.Sprint(i)
			}
			mu.Unlock()
			return nil
		}
		work := func(cl claimer, now time.Time) error {
			if _, err := cl.s.Heartbeat(ctx, cl.pid, engine.At(now)); err != nil {
				return err
			}
			res, err := cl.s.Claim(ctx, engine.ClaimParams{ProcessID: cl.pid, Queues: []string{"default"}, Max: 4,
				Clock: engine.At(now), Limits: lim, Horizon: horizon, Fair: true})
			if err != nil {
				return err
			}
			var o engine.Outcomes
			mu.Lock()
			for _, j := range res.Jobs {
				claimed[j.ID]++
				for _, k := range j.RateKeys {
					at := res.DecidedAt
					if at.IsZero() {
						at = now
					}
					admitted = append(admitted, at)
					admittedBy[k.Key] = append(admittedBy[k.Key], at)
				}
				o.Completed = append(o.Completed, j.Run())
				if j.HoldsSlot {
					o.SlotHolders = append(o.SlotHolders, j.Run())
				}
			}
			mu.Unlock()
			return cl.s.Finish(ctx, cl.pid, engine.At(now), o)
		}
		check := func(step int) {
			t.Helper()
			sems, err := s.ListSemaphores(ctx)
			require.NoError(t, err)
			for _, sm := range sems {
				require.Equal(t, sm.Held, sm.Holding, "step %d: semaphore %s counts its holders exactly", step, sm.Name)
				require.LessOrEqual(t, sm.Held, sm.Limit, "step %d: semaphore %s", step, sm.Name)
			}
			parked, err := s.ListJobs(ctx, engine.JobFilter{State: engine.StateParked, Limit: 100000})
			require.NoError(t, err)
			perKey := map[string]int{}
			for _, j := range parked {
				perKey[j.WaitKey]++
			}
			bs, err := s.ListBudgets(ctx)
			require.NoError(t, err)
			counted := map[string]int{}
			for _, b := range bs {
				counted[b.Name] = b.Parked
			}
			mu.Lock()
			maxParked = max(maxParked, len(parked))
			mu.Unlock()
			for k, n := range perKey {
				require.GreaterOrEqual(t, counted[k], n, "step %d: budget %s counts its parked jobs (it may run ahead, never behind)", step, k)
			}
			for k, ts := range admittedBy {
				require.LessOrEqual(t, ratelimit.BusiestWindow(ts, lim.spec.Per), lim.spec.To, "step %d: budget %s admits at most To in any window of Per", step, k)
			}
			for id, n := range claimed {
				require.Equal(t, 1, n, "step %d: job %d claimed once", step, id)
			}
		}
		round := func(step int, enqueue bool) {
			t.Helper()
			c.Advance(time.Second)
			now := c.Now()
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for _, d := range ds {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						res, err := d.Tick(ctx)
						if err != nil {
							errs <- fmt.Errorf("dispatcher: %w", err)
							return
						}
						mu.Lock()
						unparked += res.Unparked
						promoted += res.Promoted
						mu.Unlock()
						if !res.Full {
							return
						}
					}
				}()
			}
			for _, cl := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := work(cl, now); err != nil {
						errs <- fmt.Errorf("claimer: %w", err)
					}
				}()
			}
			if enqueue {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := add(now); err != nil {
						errs <- fmt.Errorf("enqueue: %w", err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("step %d: %v", step, err)
			}
			check(step)
		}
		for step := range 60 {
			round(step, true)
		}
		for step := 60; step < 400 && len(claimed) < len(enqueued); step++ {
			round(step, false)
		}
		require.Equal(t, len(enqueued), len(claimed), "every job ran (%d of %d)", len(claimed), len(enqueued))
		for id := range enqueued {
			require.Equal(t, 1, claimed[id], "job %d ran once", id)
		}
		t.Logf("%d jobs, %d admissions on the budgets, %d promoted, %d unparked, at most %d parked at once", len(enqueued), len(admitted), promoted, unparked, maxParked)
		require.NotZero(t, unparked, "the dispatchers unparked jobs")
	})
}
