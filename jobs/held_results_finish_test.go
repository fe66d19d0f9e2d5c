package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// obsFinishLog records what OnFinish reported, by job.
type obsFinishLog struct {
	mu  sync.Mutex
	out map[int64][]jobs.Outcome
}

func (l *obsFinishLog) hook(e jobs.FinishEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.out == nil {
		l.out = map[int64][]jobs.Outcome{}
	}
	l.out[e.JobID] = append(l.out[e.JobID], e.Outcome)
}

func (l *obsFinishLog) of(id int64) []jobs.Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]jobs.Outcome(nil), l.out[id]...)
}

// docs/observability.md: "OnFinish reports each run the worker starts
// once", and "a run released at shutdown counts once, as `released`";
// FinishEvent.Outcome "is what became of the run". A run whose result
// waited for a key an app's transaction held past the shutdown timeout
// is released by the worker itself (releaseHeld): its completion is
// dropped and the job runs again. OnFinish (and so
// sluice_jobs_finished_total and sluice.jobs.finished) used to report it
// completed when its handler returned, and nothing of the release: a job
// that completes once counted two completions once it ran again. It is
// now reported once, released.
func TestARunWhoseHeldResultIsReleasedAtShutdownIsReportedReleased(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var log obsFinishLog
		w := h.worker(jobs.WorkerConfig{Concurrency: 4, PollInterval: time.Hour, ShutdownTimeout: 5 * time.Second,
			Hooks: jobs.Hooks{OnFinish: log.hook}})
		k, done := stopWhileHeld(t, h, w)
		h.clock.Advance(5 * time.Second)
		require.NoError(t, within(t, done, "Run did not return at its shutdown timeout"))
		st, _, _ := k.state(k.a)
		require.Equal(t, engine.StateReady, st, "a was released to run again")
		require.Equal(t, []jobs.Outcome{jobs.OutcomeReleased}, log.of(k.a),
			"a's run was released (its completion dropped, the job to run again): OnFinish should say so, once")
	})
}

// DrainResult: "Completed … count the runs that ended so: completed". A
// drain whose context ends while a result waits for a key an app's
// transaction holds releases that job back to ready, its completion
// dropped: the DrainResult it returns used to count the run as completed
// (and OnFinish reported it completed, never released). It counts it in
// none, and OnFinish reports it once, released.
func TestADrainsCountsLeaveOutARunItReleased(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var log obsFinishLog
		k := newHeldKey(t, h, nil)
		close(k.release)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := drainAsync(ctx, h.worker(jobs.WorkerConfig{Concurrency: 4, Hooks: jobs.Hooks{OnFinish: log.hook}}))
		awaitFinishWait(t, h)
		cancel()
		d := within(t, done, "Drain did not return once its context ended")
		require.ErrorIs(t, d.err, context.Canceled)
		st, _, _ := k.state(k.a)
		require.Equal(t, engine.StateReady, st, "a was released to run again")
		require.Zero(t, d.res.Completed, "a's completion was dropped and the job released: DrainResult counts it completed")
		require.Equal(t, []jobs.Outcome{jobs.OutcomeReleased}, log.of(k.a),
			"a's run was released: OnFinish should say so, once")
	})
}

// A result that waited for a key an app's transaction held, and landed
// once the transaction ended, is reported to OnFinish once, with the
// outcome it was written with, when it is written: not while it waits
// (its job may yet be released, and run again).
func TestAHeldResultIsReportedOnceWhenItLands(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var log obsFinishLog
		w := h.worker(jobs.WorkerConfig{Concurrency: 4, PollInterval: time.Hour, Hooks: jobs.Hooks{OnFinish: log.hook}})
		var stop func()
		k := newHeldKey(t, h, func() { stop = sync.OnceFunc(h.run(w)) })
		defer stop()

		retry := h.clock.WaitForTimerAt(h.clock.Now().Add(jobs.HeldRetryFirst))
		close(k.release)
		plain := h.enqueue(ctxJob{})
		require.Equal(t, []int{0}, receive(t, k.started, 1))
		k.eventually(t, plain, engine.StateCompleted, "an unrelated result waits for no held key")
		require.Eventually(t, func() bool { return len(log.of(plain)) == 1 }, 20*time.Second, time.Millisecond)
		require.Equal(t, []jobs.Outcome{jobs.OutcomeCompleted}, log.of(plain))
		st, _, _ := k.state(k.a)
		require.Equal(t, engine.StateRunning, st, "a's result waits for its key")
		<-retry // a's result was left for its key
		require.Empty(t, log.of(k.a), "a's run is not reported while its result waits")

		k.end()
		h.clock.Advance(jobs.HeldRetryFirst)
		k.eventually(t, k.a, engine.StateCompleted, "a's result lands once the key is free")
		require.Eventually(t, func() bool { return len(log.of(k.a)) > 0 }, 20*time.Second, time.Millisecond)
		k.eventually(t, k.b, engine.StateCompleted, "b ran")
		stop()
		require.Equal(t, []jobs.Outcome{jobs.OutcomeCompleted}, log.of(k.a), "a's run, once, as written")
		require.Equal(t, []jobs.Outcome{jobs.OutcomeCompleted}, log.of(k.b))
	})
}

// A drain counts a result that waited for a held key once it lands, as
// the outcome it was written with, and OnFinish reports it then, once.
func TestADrainCountsAHeldResultOnceItLands(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var log obsFinishLog
		k := newHeldKey(t, h, nil)
		close(k.release)
		done := drainAsync(context.Background(), h.worker(jobs.WorkerConfig{Concurrency: 4, Hooks: jobs.Hooks{OnFinish: log.hook}}))
		awaitFinishWait(t, h)
		require.Empty(t, log.of(k.a), "a's run is not reported while its result waits")
		k.end()
		d := within(t, done, "Drain did not return once the key was free")
		require.NoError(t, d.err)
		require.Equal(t, jobs.DrainResult{Completed: 2}, d.res, "a and b, each once")
		require.Equal(t, []jobs.Outcome{jobs.OutcomeCompleted}, log.of(k.a))
		require.Equal(t, []jobs.Outcome{jobs.OutcomeCompleted}, log.of(k.b))
	})
}
