package jobs_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// finishLog collects the FinishEvents a worker reports.
type finishLog struct {
	mu     sync.Mutex
	events []jobs.FinishEvent
}

func (l *finishLog) hooks() jobs.Hooks {
	return jobs.Hooks{OnFinish: func(e jobs.FinishEvent) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.events = append(l.events, e)
	}}
}

func (l *finishLog) get() []jobs.FinishEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]jobs.FinishEvent(nil), l.events...)
}

// outcomesByJob maps each job to the outcomes reported for its runs.
func (l *finishLog) outcomesByJob() map[int64][]jobs.Outcome {
	out := map[int64][]jobs.Outcome{}
	for _, e := range l.get() {
		out[e.JobID] = append(out[e.JobID], e.Outcome)
	}
	return out
}

// observability.md, "Around each run", and the Hooks docs: a run the
// worker releases at shutdown while its handler still runs has its
// outcome never recorded, and OnFinish reports it once, as released, when
// the release is written (before Run returns: the process may exit before
// the handler does). Its handler's later return is reported no more. It
// was once reported only then, as completed (execute called the hook
// before ran saw the release), so the Prometheus and OpenTelemetry
// counters counted a completion that never happened, and no release. A
// handler that returns within the grace, on its cancelled context, is
// reported once, as released, too.
func TestARunReleasedAtShutdownIsReportedAsReleasedOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan int, 2)
		unblock := make(chan struct{})
		returned := make(chan struct{}, 2)
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[waitJob]) error {
			defer func() { returned <- struct{}{} }()
			started <- j.Args.N
			if j.Args.N == 1 {
				<-ctx.Done() // cooperative: returns within the grace
				return ctx.Err()
			}
			<-unblock // stubborn: ignores its context
			return nil
		}))
		cooperative, stubborn := h.enqueue(waitJob{N: 1}), h.enqueue(waitJob{N: 2})
		var log finishLog
		w := h.worker(jobs.WorkerConfig{Concurrency: 2, PollInterval: time.Hour, JobTimeout: -1, Hooks: log.hooks()})
		stop := h.run(w)
		receive(t, started, 2)
		go func() {
			<-h.clock.WaitForTimerAt(t0.Add(jobs.DefaultShutdownTimeout))
			h.clock.Advance(jobs.DefaultShutdownTimeout)
			<-h.clock.WaitForTimerAt(t0.Add(jobs.DefaultShutdownTimeout + time.Second))
			<-returned // the cooperative run returned within the grace
			h.clock.Advance(time.Second)
		}()
		stop()
		require.Equal(t, engine.StateReady, h.job(stubborn).State, "the stubborn run was released")
		require.Equal(t, engine.StateReady, h.job(cooperative).State)
		want := map[int64][]jobs.Outcome{cooperative: {jobs.OutcomeReleased}, stubborn: {jobs.OutcomeReleased}}
		require.Equal(t, want, log.outcomesByJob(), "each run is reported once, as released, by the time Run returns")
		for _, e := range log.get() {
			require.Equal(t, 1, e.Attempt)
			if e.JobID == stubborn {
				require.NoError(t, e.Err, "its handler had returned nothing")
				require.GreaterOrEqual(t, e.Duration, time.Duration(0))
			}
		}

		close(unblock)
		receive(t, returned, 1)
		jobs.WaitRuns(w)
		require.Equal(t, want, log.outcomesByJob(), "the released run's return is not reported")
		require.Equal(t, engine.StateReady, h.job(stubborn).State)
	})
}

// guarantees.md, "A worker that pauses": a run whose process was presumed
// dead while it ran is lost, and its result is ignored. Released at
// shutdown, it is reported once, as released (what the worker decided;
// the store's release changes nothing, the reaper having released the job
// already), and not as completed when its handler returns afterwards.
func TestALostRunReleasedAtShutdownIsNotReportedAsCompleted(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		started := make(chan struct{}, 1)
		unblock := make(chan struct{})
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[waitJob]) error {
			started <- struct{}{}
			<-unblock // ignores its context
			return nil
		}))
		id := h.enqueue(waitJob{N: 1})
		var log finishLog
		w := h.worker(jobs.WorkerConfig{Concurrency: 1, PollInterval: time.Hour, JobTimeout: -1, Hooks: log.hooks()})
		stop := h.run(w)
		receive(t, started, 1)
		first := w.ProcessID()
		n, err := h.store.ReapDeadProcesses(ctx, engine.At(t0.Add(10*time.Minute)), jobs.DefaultDeadAfter)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		<-h.clock.WaitForTimerAt(t0.Add(jobs.DefaultHeartbeatInterval))
		h.clock.Advance(jobs.DefaultHeartbeatInterval)
		<-h.clock.WaitForTimerAt(t0.Add(2 * jobs.DefaultHeartbeatInterval)) // the beat is done
		require.NotEqual(t, first, w.ProcessID(), "registered again")

		stopPastItsTimeout(h, stop)
		require.Equal(t, map[int64][]jobs.Outcome{id: {jobs.OutcomeReleased}}, log.outcomesByJob())
		close(unblock)
		jobs.WaitRuns(w)
		require.Equal(t, map[int64][]jobs.Outcome{id: {jobs.OutcomeReleased}}, log.outcomesByJob(),
			"the lost run's return is not reported as completed")
		j := h.job(id)
		require.Equal(t, engine.StateReady, j.State)
		require.Equal(t, 1, j.Attempt, "the reaper counted the lost run")
	})
}

// A handler that calls runtime.Goexit fails its attempt (goexit_test.go);
// that run is reported to OnFinish too, as every run is. It once was not:
// OnFinish was called only when execute returned.
func TestARunWhoseHandlerCallsGoexitIsReportedToOnFinish(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[waitJob]) error {
			runtime.Goexit()
			return nil
		}, jobs.MaxAttempts(1)))
		id := h.enqueue(waitJob{N: 1})
		var log finishLog
		w := h.worker(jobs.WorkerConfig{PollInterval: time.Hour, Hooks: log.hooks()})
		stop := h.run(w)
		require.Eventually(t, func() bool { return len(log.get()) > 0 }, 30*time.Second, time.Millisecond)
		stop()
		events := log.get()
		require.Len(t, events, 1)
		require.Equal(t, id, events[0].JobID)
		require.Equal(t, jobs.OutcomeFailed, events[0].Outcome)
		require.ErrorContains(t, events[0].Err, "runtime.Goexit")
		require.Equal(t, engine.StateFailed, h.job(id).State)
	})
}
