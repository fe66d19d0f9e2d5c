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

// tickWatch counts what a client's enqueue middleware and OnEnqueue hook
// see of recurring ticks: each middleware run, each outcome OnEnqueueDone
// reports to it, and each job OnEnqueue reports, with whether the job was
// committed by then (visible from another connection).
type tickWatch struct {
	t       *testing.T
	base    *engine.Store
	mu      sync.Mutex
	runs    int
	done    []error
	hooked  []int64
	visible []bool
}

func (w *tickWatch) middleware(ctx context.Context, js []*jobs.EnqueueJob, next func(context.Context) error) error {
	w.mu.Lock()
	w.runs++
	w.mu.Unlock()
	require.True(w.t, jobs.OnEnqueueDone(ctx, func(err error) {
		w.mu.Lock()
		w.done = append(w.done, err)
		w.mu.Unlock()
	}))
	return next(ctx)
}

func (w *tickWatch) onEnqueue(e jobs.EnqueueEvent) {
	// Bounded: read while the tick's transaction were still open, SQLite's
	// one connection would wait for it for good.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := w.base.ListJobs(ctx, engine.JobFilter{Kind: "report", Limit: 10})
	seen := false
	for _, j := range js {
		seen = seen || j.ID == e.ID
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hooked = append(w.hooked, e.ID)
	w.visible = append(w.visible, err == nil && seen)
}

func (w *tickWatch) client(s *engine.Store, c clock.Clock) *jobs.Client {
	return jobs.NewClient(testdb.Public(s), registry(w.t), jobs.ClientConfig{Clock: c,
		Middleware: []jobs.EnqueueMiddleware{w.middleware}, OnEnqueue: w.onEnqueue})
}

// guarantees.md, "Nothing lost": "nothing a failed attempt decided ...
// carries into the next"; observability.md: "each middleware runs once per
// enqueue, never again for a retry", OnEnqueueDone reports the enqueue's
// outcome once it is settled, and ClientConfig.OnEnqueue "runs after the
// commit" (metrics.OnEnqueue counts enqueued jobs with it).
//
// A recurring task's tick enqueues in the tick's own transaction, with its
// record. One that deadlocks after the enqueue (here at the statement that
// records the tick's job) fails, rolled back: its middleware ran once and
// learns the failure, OnEnqueue reports nothing. The next round runs the
// tick again, a new enqueue: its middleware runs once, and OnEnqueue
// reports the one job, committed.
func TestARetriedTickReportsItsEnqueueOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		s, faults := testdb.WithFaults(base)
		faults.FailOnce = "UPDATE sluice_recurring_runs SET job_id" // SetTickJob, after the enqueue
		c := clock.NewFake(t0)
		w := &tickWatch{t: t, base: base}
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Client: w.client(s, c),
			Tasks: []dispatcher.Task{{Key: "hourly", Schedule: "@hourly", Args: report{Period: "1h"}}}})
		c.Advance(time.Hour)
		_, err := d.Tick(ctx)
		require.Error(t, err, "the tick deadlocked")
		require.Empty(t, faults.FailOnce, "the deadlock fired")
		require.Empty(t, reports(t, base), "rolled back")
		w.mu.Lock()
		require.Equal(t, 1, w.runs, "the middleware ran once: the tick's transaction was not run again")
		require.Len(t, w.done, 1)
		require.Error(t, w.done[0], "the middleware learns the enqueue failed")
		require.Empty(t, w.hooked, "OnEnqueue reports no job that was rolled back")
		w.mu.Unlock()

		c.Advance(time.Second)
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		js := reports(t, base)
		require.Len(t, js, 1, "one job for the tick")
		w.mu.Lock()
		defer w.mu.Unlock()
		require.Equal(t, 2, w.runs, "once for each enqueue")
		require.Len(t, w.done, 2)
		require.NoError(t, w.done[1])
		require.Equal(t, []int64{js[0].ID}, w.hooked, "OnEnqueue reports the committed job, once")
		require.Equal(t, []bool{true}, w.visible, "after the commit")
	})
}

// docs/recurring.md, "Exactly once per tick": a tick that deadlocks in one
// dispatcher fails there, rolled back; another dispatcher runs it; the
// first, trying it again on its next round, finds it recorded. One job
// for the tick, reported once; the failed enqueue's middleware learned it
// failed.
func TestATickThatDeadlocksInOneDispatcherIsEnqueuedOnceByAnother(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		s, faults := testdb.WithFaults(base)
		faults.FailOnce = "UPDATE sluice_recurring_runs SET job_id"
		c := clock.NewFake(t0)
		w := &tickWatch{t: t, base: base}
		tasks := []dispatcher.Task{{Key: "hourly", Schedule: "@hourly", Args: report{Period: "1h"}}}
		first := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Client: w.client(s, c), Tasks: tasks})
		second := newDispatcher(t, base, dispatcher.Config{Clock: c, Logger: quiet(), Client: w.client(base, c), Tasks: tasks})
		c.Advance(time.Hour)
		_, err := first.Tick(ctx)
		require.Error(t, err)
		_, err = second.Tick(ctx)
		require.NoError(t, err)
		require.Len(t, reports(t, base), 1)
		c.Advance(time.Second)
		_, err = first.Tick(ctx)
		require.NoError(t, err, "the tick is recorded: the first dispatcher moves on")
		js := reports(t, base)
		require.Len(t, js, 1)
		w.mu.Lock()
		defer w.mu.Unlock()
		require.Equal(t, 2, w.runs)
		require.Len(t, w.done, 2)
		require.Error(t, w.done[0])
		require.NoError(t, w.done[1])
		require.Equal(t, []int64{js[0].ID}, w.hooked)
	})
}

// recurring.md, "Exactly once per tick": a recurring task's tick whose
// commit lands and whose reply is lost fails in the dispatcher; its next
// round finds the tick recorded (with its job) and moves on: one job for
// the tick, not two, and the next tick is enqueued as usual.
func TestARecurringTickWhoseCommitReplyIsLostIsEnqueuedOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		ls, db := lossy(s)
		db.lose = loseOnce("INSERT INTO sluice_recurring_runs")
		c := clock.NewFake(t0)
		client := jobs.NewClient(testdb.Public(ls), registry(t), jobs.ClientConfig{Clock: c})
		d := newDispatcher(t, ls, dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
			Tasks: []dispatcher.Task{{Key: "hourly", Schedule: "@hourly", Args: report{Period: "1h"}}}})
		c.Advance(time.Hour)
		_, err := d.Tick(ctx)
		require.ErrorIs(t, err, errReset, "the tick's commit landed, its reply lost")
		require.Len(t, reports(t, s), 1, "the tick's job is committed with its record")
		for range 5 {
			c.Advance(time.Second)
			_, err = d.Tick(ctx)
			require.NoError(t, err)
		}
		require.Len(t, reports(t, s), 1, "tried again, the tick is found recorded: no second job")
		c.Advance(time.Hour)
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		require.Len(t, reports(t, s), 2, "the next tick is enqueued")
	})
}
