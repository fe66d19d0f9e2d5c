package dispatcher_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func scheduled(t *testing.T, s *engine.Store, n int, at time.Time) []int64 {
	t.Helper()
	jobs := make([]engine.NewJob, n)
	for i := range jobs {
		jobs[i] = engine.NewJob{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1, RunAt: at}
	}
	res, err := s.Enqueue(context.Background(), nil, engine.At(t0), jobs)
	require.NoError(t, err)
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

func TestTickPromotesInBatchesAndSaysWhenFull(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		c := clock.NewFake(t0)
		scheduled(t, s, 1200, t0.Add(time.Second))
		scheduled(t, s, 5, t0.Add(time.Hour))
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet()})
		res, err := d.Tick(context.Background())
		require.NoError(t, err)
		require.Zero(t, res.Promoted, "nothing is due yet")
		c.Advance(time.Second)
		var got []int
		for {
			res, err := d.Tick(context.Background())
			require.NoError(t, err)
			got = append(got, res.Promoted)
			if !res.Full {
				break
			}
		}
		require.Equal(t, []int{500, 500, 200}, got)
	})
}

// oneLimit declares one rate limit for every job's budget.
type oneLimit struct{ spec ratelimit.Spec }

func (l oneLimit) RateSpec(_, _ string) (ratelimit.Spec, bool) { return l.spec, true }
func (oneLimit) QueueLimits(string) []engine.QueueLimit        { return nil }

// A tick hands slots to at most BatchSize parked jobs, across budgets, and
// says it is full when it did, so that Run ticks again at once.
func TestTickUnparksInBatchesAndSaysWhenFull(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		p, burst, err := ratelimit.NewParams(1, time.Second, 1)
		require.NoError(t, err)
		lim := oneLimit{ratelimit.Spec{Scope: "k", To: 1, Per: time.Second, Burst: burst, Params: p}}
		var jobs []engine.NewJob
		for i := range 60 {
			jobs = append(jobs, engine.NewJob{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1,
				RateKeys: []engine.RateKey{{Key: fmt.Sprintf("k/%d", i%3), Cost: 1}}})
		}
		_, err = s.Enqueue(ctx, nil, engine.At(t0), jobs)
		require.NoError(t, err)
		pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", Name: "w"}, engine.At(t0))
		require.NoError(t, err)
		// Each budget admits one job and gives the next 5 slots within a
		// 5-second horizon; its other 14 jobs park.
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 60,
			Clock: engine.At(t0), Limits: lim, Horizon: 5 * time.Second})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 3)
		parked := 0
		for _, d := range res.Deferred {
			if d.Parked {
				parked++
			}
		}
		require.Equal(t, 42, parked)

		// Five seconds on, the slotted jobs are due; promoted, they leave
		// the ticks below only parked jobs to move. A 30-second horizon
		// holds a slot for each of the 42 (from 6 s): 8 to a tick.
		now := t0.Add(5 * time.Second)
		n, _, err := s.Promote(ctx, engine.At(now), 100)
		require.NoError(t, err)
		require.Equal(t, 15, n)
		d := newDispatcher(t, s, dispatcher.Config{Clock: clock.NewFake(now), Logger: quiet(), BatchSize: 8, Horizon: 30 * time.Second})
		var got []int
		for {
			res, err := d.Tick(ctx)
			require.NoError(t, err)
			require.Zero(t, res.Promoted, "no slot is due yet")
			got = append(got, res.Unparked)
			if !res.Full {
				break
			}
		}
		require.Equal(t, []int{8, 8, 8, 8, 8, 2}, got)
	})
}

func TestSeveralDispatchersPromoteEachJobOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		c := clock.NewFake(t0)
		for i := 1; i <= 30; i++ {
			scheduled(t, s, 40, t0.Add(time.Duration(i)*time.Minute))
		}
		var mu sync.Mutex
		total := 0
		var wg sync.WaitGroup
		for k := 0; k < 3; k++ {
			d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), BatchSize: 25})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for step := 0; step < 40; step++ {
					for {
						res, err := d.Tick(context.Background())
						require.NoError(t, err)
						mu.Lock()
						total += res.Promoted
						mu.Unlock()
						if !res.Full {
							break
						}
					}
				}
			}()
		}
		for m := 0; m < 31; m++ {
			c.Advance(time.Minute)
		}
		wg.Wait()
		// Whatever the interleaving, a last tick after the clock passed
		// every run time promotes what is left: each job exactly once.
		res, err := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), BatchSize: 5000}).Tick(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1200, total+res.Promoted)
		st, err := s.Stats(context.Background())
		require.NoError(t, err)
		require.Equal(t, int64(1200), st[0].Counts[engine.StateReady])
	})
}

func TestRunPromotesOnItsInterval(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		c := clock.NewFake(t0)
		id := scheduled(t, s, 1, t0.Add(3*time.Second))[0]
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet()})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		for i := 1; i <= 3; i++ {
			<-c.WaitForTimerAt(t0.Add(time.Duration(i) * time.Second))
			j, err := s.GetJob(context.Background(), id)
			require.NoError(t, err)
			require.Equal(t, engine.StateScheduled, j.State, "not promoted before its time (tick %d)", i)
			c.Advance(time.Second)
		}
		<-c.WaitForTimerAt(t0.Add(4 * time.Second)) // the tick at 3 s has run
		j, err := s.GetJob(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, j.State)
		cancel()
		require.NoError(t, <-done)
		procs, err := s.ListProcesses(context.Background())
		require.NoError(t, err)
		require.Empty(t, procs, "it deregisters when it stops")
	})
}

func TestIdleBudgetsAreClearedHourlyUnlessTurnedOff(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0) // 12:00:00: the first hourly tick is 13:00
		idle := func(name string) {
			_, err := s.DB().Exec(ctx, "INSERT INTO sluice_budgets (name, tat_ns, next_slot_ns, interval_ns, burst, updated_at) VALUES ('"+name+"', 1, 1, 1000000000, 1, 1)")
			require.NoError(t, err)
		}
		budgets := func() int {
			bs, err := s.ListBudgets(ctx)
			require.NoError(t, err)
			return len(bs)
		}
		idle("k/a")
		off := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Maintenance: dispatcher.Maintenance{ClearIdleBudgets: dispatcher.MaintenanceTask{Off: true}}})
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet()})
		c.Advance(59 * time.Minute)
		_, err := d.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, budgets(), "not before the hour")
		c.Advance(time.Minute)
		_, err = off.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, budgets(), "turned off")
		tasks, err := off.Tasks(ctx)
		require.NoError(t, err)
		enabled := map[string]bool{}
		for _, ti := range tasks {
			enabled[ti.Key] = ti.Enabled
		}
		require.Equal(t, map[string]bool{dispatcher.TaskClearIdleBudgets: false, dispatcher.TaskClearFinishedJobs: true, dispatcher.TaskFreeExpiredSlots: true},
			enabled, "a task turned off is listed, as off")
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		require.Zero(t, budgets(), "cleared at 13:00")
		idle("k/b")
		c.Advance(30 * time.Minute)
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, budgets(), "the next run is at 14:00")
	})
}

// newDispatcher makes a dispatcher, failing the test on an error.
func newDispatcher(t testing.TB, s *engine.Store, cfg dispatcher.Config) *dispatcher.Dispatcher {
	t.Helper()
	d, err := dispatcher.New(testdb.Public(s), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A dispatcher stopped before it started returns nil, as a graceful stop.
func TestADispatcherStoppedBeforeItStartsReturnsNil(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		d := newDispatcher(t, s, dispatcher.Config{Logger: quiet()})
		require.NoError(t, d.Run(ctx))
		ps, err := s.ListProcesses(context.Background())
		require.NoError(t, err)
		require.Empty(t, ps)
	})
}
