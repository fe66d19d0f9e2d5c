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
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// docs/recurring.md, "Exactly once per tick": "however many dispatchers
// run, only the first to reach a tick enqueues it; the others find the
// record and move on", and "one that catches up after a long stall runs
// only the latest tick that has passed (if nobody ran it)".
//
// The hourly clean-up deletes tick records older than a week
// (DeleteTicks, before now − max(Retention, 7 days)), whatever the task's
// schedule. A monthly task's tick is then unrecorded a week after it ran:
// a second dispatcher that stalled over it (a suspended VM, a frozen
// process) and catches up finds no record of the latest tick and enqueues
// it again, eight days late. The same deletion makes `myapp recurring`
// (Dispatcher.Tasks) show no last run for the task, though it ran.
func TestReviewAStalledDispatcherDoesNotRunAgainAMonthlyTickAnotherRan(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0) // 2026-03-01 12:00
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c})
		cfg := dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
			Tasks: []dispatcher.Task{{Key: "monthly", Schedule: "0 0 1 * *", Args: report{Period: "month"}}}}
		stalled := newDispatcher(t, s, cfg)
		live := newDispatcher(t, s, cfg)
		sched, err := dispatcher.ParseSchedule("0 0 1 * *")
		require.NoError(t, err)
		tick := sched.Next(t0) // April 1st, 00:00

		c.Set(tick)
		_, err = live.Tick(ctx)
		require.NoError(t, err)
		require.Len(t, reports(t, s), 1, "the live dispatcher runs April 1st")
		c.Set(tick.Add(8 * 24 * time.Hour)) // April 9th: its hourly clean-up runs
		_, err = live.Tick(ctx)
		require.NoError(t, err)

		infos, err := live.Tasks(ctx)
		require.NoError(t, err)
		for _, i := range infos {
			if i.Key == "monthly" && !i.Last.RunAt.Equal(tick) {
				t.Errorf("the task's last run is listed as %v; want April 1st, when it ran", i.Last.RunAt)
			}
		}

		c.Advance(time.Second)
		_, err = stalled.Tick(ctx) // caught up after a stall over April 1st
		require.NoError(t, err)
		require.Len(t, reports(t, s), 1, "April 1st ran once, by the live dispatcher; the stalled one must not run it again")
	})
}

// reviewLimits declares one rate limit for the scope "k".
type reviewLimits struct{ spec ratelimit.Spec }

func (l reviewLimits) RateSpec(scope, _ string) (ratelimit.Spec, bool) {
	return l.spec, scope == "k"
}
func (reviewLimits) QueueLimits(string) []engine.QueueLimit { return nil }

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
func TestReviewThreeDispatchersCleaningUpWhileClaimsRunKeepEveryPromise(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		p, burst, err := ratelimit.NewParams(3, 10*time.Second, 1)
		require.NoError(t, err)
		lim := reviewLimits{ratelimit.Spec{Scope: "k", To: 3, Per: 10 * time.Second, Burst: burst, Params: p}}
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

// tickRecords returns the recorded ticks of a task, by their time, with
// the job each enqueued, failing the test on a tick recorded without one.
func tickRecords(t *testing.T, s *engine.Store, task string) map[time.Time]int64 {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), "SELECT task, run_at, job_id FROM sluice_recurring_runs")
	require.NoError(t, err)
	defer rows.Close()
	out := map[time.Time]int64{}
	for rows.Next() {
		var name string
		var runAt int64
		var job *int64
		require.NoError(t, rows.Scan(&name, &runAt, &job))
		if name != task {
			continue
		}
		require.NotNil(t, job, "the tick at %s recorded its job", engine.FromMicros(runAt))
		out[engine.FromMicros(runAt)] = *job
	}
	require.NoError(t, rows.Err())
	return out
}

// docs/recurring.md, "Exactly once per tick": "however many dispatchers
// run, only the first to reach a tick enqueues it … A dispatcher that
// restarts starts from the next tick after it starts, so it neither
// repeats the tick that ran before the restart nor loses any tick another
// dispatcher was running." Three dispatchers tick at once every minute
// for three hours while one of them restarts every 25 minutes (some
// restarts falling on a tick): every tick of both tasks ran, once, with
// one job each.
func TestReviewThreeDispatchersRestartingInTurnEnqueueEachTickOnce(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0) // 12:00
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c})
		cfg := dispatcher.Config{Clock: c, Logger: quiet(), Client: client, Tasks: []dispatcher.Task{
			{Key: "every-10m", Schedule: "*/10 * * * *", Args: report{Period: "10m"}},
			{Key: "every-7m", Schedule: "@every 7m", Args: report{Period: "7m"}},
		}}
		pools := []*engine.Store{open(), open(), open()}
		ds := make([]*dispatcher.Dispatcher, 3)
		for i := range ds {
			ds[i] = newDispatcher(t, pools[i], cfg)
		}
		for m := 1; m <= 180; m++ {
			c.Advance(time.Minute)
			if m%25 == 0 {
				i := (m / 25) % 3
				ds[i] = newDispatcher(t, pools[i], cfg) // restarted: at 12:25, 12:50 (a tick), …
			}
			var wg sync.WaitGroup
			for _, d := range ds {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := d.Tick(ctx)
					assert(t, err)
				}()
			}
			wg.Wait()
		}
		end := c.Now()
		jobsSeen := map[int64]bool{}
		for _, task := range cfg.Tasks {
			sched, err := dispatcher.ParseSchedule(task.Schedule)
			require.NoError(t, err)
			var want []time.Time
			for tick := sched.Next(t0); !tick.After(end); tick = sched.Next(tick) {
				want = append(want, tick.UTC())
			}
			got := tickRecords(t, s, task.Key)
			var gotTicks []time.Time
			for tick, job := range got {
				gotTicks = append(gotTicks, tick.UTC())
				require.False(t, jobsSeen[job], "job %d enqueued by one tick only", job)
				jobsSeen[job] = true
			}
			require.ElementsMatch(t, want, gotTicks, "task %s: every tick, once", task.Key)
		}
		require.Len(t, reports(t, s), len(jobsSeen), "one job per tick, none without its tick")
	})
}

// A task whose schedule changes at a restart while another dispatcher
// still runs the old one (a rolling deploy): each dispatcher runs the
// ticks of its own schedule, and a tick both schedules share runs once.
// (docs/recurring.md does not say what a changed schedule does.)
func TestReviewAScheduleChangedInARollingDeployRunsEachTickOfEitherOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0) // 12:00
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c})
		task := func(spec string) dispatcher.Config {
			return dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
				Tasks: []dispatcher.Task{{Key: "report", Schedule: spec, Args: report{}}}}
		}
		a, b := newDispatcher(t, s, task("0 * * * *")), newDispatcher(t, s, task("0 * * * *"))
		for m := 1; m <= 180; m++ {
			c.Advance(time.Minute)
			if m == 90 {
				a = newDispatcher(t, s, task("*/20 * * * *")) // 13:30: the new version
			}
			for _, d := range []*dispatcher.Dispatcher{a, b} {
				_, err := d.Tick(ctx)
				require.NoError(t, err)
			}
		}
		var got []string
		for tick := range tickRecords(t, s, "report") {
			got = append(got, tick.UTC().Format("15:04"))
		}
		require.ElementsMatch(t, []string{"13:00", "13:40", "14:00", "14:20", "14:40", "15:00"}, got)
		require.Len(t, reports(t, s), 6)
	})
}

// A dispatcher stopped in the middle of a tick (its context cancelled
// while the tick's job is being enqueued, after the job's row was
// written): the tick commits whole or not at all — its record and its job
// together — the enqueue middleware learns the outcome that holds, Run
// returns nil and the dispatcher deregisters. (docs/recurring.md: a tick
// records itself "in the same transaction that enqueues its job".)
func TestReviewADispatcherStoppedInTheMiddleOfATickCommitsItWholeOrNotAtAll(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		c := clock.NewFake(t0)
		var mu sync.Mutex
		var outcomes []error
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c,
			Middleware: []jobs.EnqueueMiddleware{func(ctx context.Context, js []*jobs.EnqueueJob, next func(context.Context) error) error {
				jobs.OnEnqueueDone(ctx, func(err error) {
					mu.Lock()
					outcomes = append(outcomes, err)
					mu.Unlock()
				})
				err := next(ctx)
				stop() // SIGTERM, as the tick's job is written
				return err
			}}})
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
			Tasks: []dispatcher.Task{{Key: "every-minute", Schedule: "@every 1m", Args: report{}}}})
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		for i := 1; i <= 60; i++ {
			<-c.WaitForTimerAt(t0.Add(time.Duration(i) * time.Second))
			c.Advance(time.Second)
		}
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("the dispatcher did not stop")
		}
		records := tickRecords(t, s, "every-minute")
		js := reports(t, s)
		require.Len(t, js, len(records), "a tick's record and its job commit together")
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, outcomes, 1, "the middleware ran once and learned its outcome")
		if len(records) == 1 {
			require.NoError(t, outcomes[0], "the tick committed: its enqueue succeeded")
		} else {
			require.Error(t, outcomes[0], "the tick rolled back: its enqueue failed")
		}
		ps, err := s.ListProcesses(context.Background())
		require.NoError(t, err)
		require.Empty(t, ps, "it deregistered")
	})
}
