package dispatcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

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
func TestThreeDispatchersRestartingInTurnEnqueueEachTickOnce(t *testing.T) {
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

// docs/recurring.md, "Changing or removing a task": a task whose schedule
// changes at a restart while another dispatcher still runs the old one (a
// rolling deploy): each dispatcher runs the ticks of its own schedule,
// and a tick both schedules share runs once.
func TestAScheduleChangedInARollingDeployRunsEachTickOfEitherOnce(t *testing.T) {
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
func TestADispatcherStoppedInTheMiddleOfATickCommitsItWholeOrNotAtAll(t *testing.T) {
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
		// A round a second until the minute's tick stops it. A wait may be
		// met by the heartbeat's timer (due at 12:01 too) before the round
		// under way sets its own; the tick then comes a round later, so the
		// rounds go on until the stop, not to a fixed count.
	rounds:
		for i := 1; i <= 120; i++ {
			select {
			case <-c.WaitForTimerAt(t0.Add(time.Duration(i) * time.Second)):
			case <-ctx.Done():
				break rounds
			}
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
