package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/sluicequeue/sluice/internal/testdb"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type ctxKey string

// record returns middleware that appends its name to *trail before and
// after the rest of the chain.
func record(mu *sync.Mutex, trail *[]string, name string) jobs.Middleware {
	return func(ctx context.Context, _ jobs.JobInfo, next func(context.Context) error) error {
		mu.Lock()
		*trail = append(*trail, name+">")
		mu.Unlock()
		err := next(ctx)
		mu.Lock()
		*trail = append(*trail, "<"+name)
		mu.Unlock()
		return err
	}
}

func TestMiddlewareWrapsTheHandlerOutermostFirst(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var trail []string
		var seen jobs.JobInfo
		var handlerCtx context.Context
		var handlerMeta map[string]string
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[email]) error {
			mu.Lock()
			trail = append(trail, "handler")
			mu.Unlock()
			handlerCtx, handlerMeta = ctx, j.Metadata
			return nil
		}, jobs.WithMiddleware(record(&mu, &trail, "kind1"), record(&mu, &trail, "kind2")), jobs.Priority(3)))
		id := h.enqueue(email{To: "a@example.com"}, jobs.WithMetadata(map[string]string{"tenant": "acme", "nul": "x\x00y"}))
		res := h.drain(jobs.WorkerConfig{Middleware: []jobs.Middleware{
			record(&mu, &trail, "worker1"),
			func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
				seen = job
				return next(context.WithValue(ctx, ctxKey("k"), "v"))
			},
			record(&mu, &trail, "worker2"),
		}})
		require.Equal(t, 1, res.Completed)
		require.Equal(t, []string{"worker1>", "worker2>", "kind1>", "kind2>", "handler", "<kind2", "<kind1", "<worker2", "<worker1"}, trail)
		require.Equal(t, "v", handlerCtx.Value(ctxKey("k")), "a middleware's context reaches the handler")
		require.Equal(t, id, seen.ID)
		require.Equal(t, "email", seen.Kind)
		require.Equal(t, "default", seen.Queue)
		require.Equal(t, 1, seen.Attempt)
		require.Equal(t, jobs.DefaultMaxAttempts, seen.MaxAttempts)
		require.Equal(t, 3, seen.Priority)
		require.Equal(t, t0, seen.EnqueuedAt)
		require.Equal(t, t0, seen.ClaimedAt)
		require.Equal(t, map[string]string{"tenant": "acme", "nul": "x\x00y"}, seen.Metadata)
		require.Equal(t, seen.Metadata, handlerMeta)
		require.Zero(t, seen.Deferrals)
		require.Zero(t, seen.LimitWait)
		require.Nil(t, seen.Budgets)
		require.Equal(t, 1, seen.Calls)
	})
}

func TestMiddlewareDecidesTheRunsError(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		fails := errors.New("handler failed")
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[noop]) error { return fails }))
		var finished []jobs.FinishEvent
		snooze := func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
			err := next(ctx)
			require.Equal(t, jobs.OutcomeRetried, jobs.Classify(ctx, job, err).Outcome)
			if errors.Is(err, fails) {
				return jobs.Snooze(time.Minute)
			}
			return err
		}
		id := h.enqueue(noop{})
		res := h.drain(jobs.WorkerConfig{Middleware: []jobs.Middleware{snooze},
			Hooks: jobs.Hooks{OnFinish: func(e jobs.FinishEvent) { finished = append(finished, e) }}})
		require.Equal(t, 1, res.Snoozed, "the middleware's error, not the handler's, decides")
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Equal(t, t0.Add(time.Minute), j.RunAt)
		require.Len(t, finished, 1, "hooks still see every run")
		require.Equal(t, jobs.OutcomeSnoozed, finished[0].Outcome)
	})
}

func TestMiddlewareThatPanicsFailsTheAttempt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ran := false
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[noop]) error { ran = true; return nil }))
		id := h.enqueue(noop{})
		res := h.drain(jobs.WorkerConfig{Middleware: []jobs.Middleware{
			func(context.Context, jobs.JobInfo, func(context.Context) error) error { panic("middleware bug") },
		}})
		require.Equal(t, 1, res.Retried)
		require.False(t, ran)
		require.Contains(t, h.job(id).LastError, "panic: middleware bug")
	})
}

func TestMiddlewareSeesTheDeferralsOfARateLimitedJob(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[email]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[email]{To: 1, Per: time.Second, Burst: 1, Key: func(e email) any { return e.To }})))
		require.NoError(t, h.reg.LimitQueue("default", ratelimit.QueueLimit{To: 100, Per: time.Second, Burst: 100}))
		var infos []jobs.JobInfo
		cfg := jobs.WorkerConfig{Middleware: []jobs.Middleware{func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
			infos = append(infos, job)
			return next(ctx)
		}}}
		h.enqueue(email{To: "a"})
		second := h.enqueue(email{To: "a"})
		res := h.drain(cfg)
		require.Equal(t, 1, res.Completed)
		require.Equal(t, 1, res.Deferred)
		h.clock.Advance(1500 * time.Millisecond)
		res = h.drain(cfg)
		require.Equal(t, 1, res.Completed)
		require.Len(t, infos, 2)
		first, last := infos[0], infos[1]
		require.Zero(t, first.Deferrals)
		require.Equal(t, second, last.ID)
		require.Equal(t, 1, last.Deferrals)
		require.Equal(t, "rate limit email/a", last.DeferralReason)
		require.Equal(t, t0, last.DeferredAt)
		require.Equal(t, 1500*time.Millisecond, last.LimitWait)
		require.Equal(t, []jobs.Budget{{Key: "email/a", Cost: 1}, {Key: "@queue/default", Cost: 1}}, last.Budgets)
	})
}

func TestEnqueueMiddlewareWritesMetadata(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[noop]) error { return nil }))
		var batches [][]jobs.EnqueueJob
		stamp := func(ctx context.Context, js []*jobs.EnqueueJob, next func(context.Context) error) error {
			for _, j := range js {
				if rid, ok := ctx.Value(ctxKey("request")).(string); ok {
					j.SetMetadata("request_id", rid)
				}
			}
			err := next(ctx)
			batch := make([]jobs.EnqueueJob, len(js))
			for i, j := range js {
				batch[i] = *j
			}
			batches = append(batches, batch)
			return err
		}
		c := jobs.NewClient(testdb.Public(h.store), h.reg, jobs.ClientConfig{Clock: h.clock, Middleware: []jobs.EnqueueMiddleware{stamp}})
		ctx := context.WithValue(context.Background(), ctxKey("request"), "r-1")
		one, err := c.Enqueue(ctx, noop{N: 1}, jobs.WithMetadata(map[string]string{"tenant": "acme"}), jobs.Queue("q"), jobs.Delay(time.Minute))
		require.NoError(t, err)
		many, err := c.EnqueueMany(ctx, []jobs.Item{{Args: noop{N: 2}}, {Args: noop{N: 3}}})
		require.NoError(t, err)

		require.Len(t, batches, 2, "one call per enqueue, the batch together")
		require.Len(t, batches[1], 2)
		require.Equal(t, "q", batches[0][0].Queue)
		require.Equal(t, t0.Add(time.Minute), batches[0][0].RunAt)
		require.Equal(t, one, batches[0][0].Result, "the result is there once next returns")
		require.Equal(t, many[1], batches[1][1].Result)
		md, err := engine.DecodeMetadata(h.job(one.ID).Metadata)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"tenant": "acme", "request_id": "r-1"}, md)
		md, err = engine.DecodeMetadata(h.job(many[0].ID).Metadata)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"request_id": "r-1"}, md)
	})
}

func TestBadMetadataIsRefusedAtEnqueue(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[noop]) error { return nil }))
		_, err := h.client.Enqueue(ctx, noop{}, jobs.WithMetadata(map[string]string{"k": strings.Repeat("x", 9000)}))
		require.ErrorIs(t, err, jobs.ErrInvalidMetadata)
		require.ErrorContains(t, err, "enqueue noop")
		require.ErrorContains(t, err, "at most 8192")
		_, err = h.client.Enqueue(ctx, noop{}, jobs.WithMetadata(map[string]string{"k": "\xc3\x28"}))
		require.ErrorIs(t, err, jobs.ErrInvalidMetadata)
		require.ErrorContains(t, err, `WithMetadata: invalid metadata: the value of "k" is not valid UTF-8`)

		// Metadata a middleware sets is checked too, before anything is
		// written.
		huge := func(ctx context.Context, js []*jobs.EnqueueJob, next func(context.Context) error) error {
			js[len(js)-1].SetMetadata("big", strings.Repeat("y", 10_000))
			return next(ctx)
		}
		c := jobs.NewClient(testdb.Public(h.store), h.reg, jobs.ClientConfig{Clock: h.clock, Middleware: []jobs.EnqueueMiddleware{huge}})
		_, err = c.EnqueueMany(ctx, []jobs.Item{{Args: noop{}}, {Args: noop{}}})
		require.ErrorIs(t, err, jobs.ErrInvalidMetadata)
		require.ErrorContains(t, err, "job 1")

		skip := func(context.Context, []*jobs.EnqueueJob, func(context.Context) error) error { return nil }
		_, err = jobs.NewClient(testdb.Public(h.store), h.reg, jobs.ClientConfig{Middleware: []jobs.EnqueueMiddleware{skip}}).Enqueue(ctx, noop{})
		require.ErrorContains(t, err, "did not call next")
		twice := func(ctx context.Context, _ []*jobs.EnqueueJob, next func(context.Context) error) error {
			if err := next(ctx); err != nil {
				return err
			}
			return next(ctx)
		}
		_, err = jobs.NewClient(testdb.Public(h.store), h.reg, jobs.ClientConfig{Middleware: []jobs.EnqueueMiddleware{twice}}).Enqueue(ctx, noop{})
		require.ErrorContains(t, err, "called next twice")
		_, err = jobs.NewClient(testdb.Public(h.store), h.reg, jobs.ClientConfig{Middleware: []jobs.EnqueueMiddleware{nil}}).Enqueue(ctx, noop{})
		require.ErrorContains(t, err, "ClientConfig.Middleware 0 is nil")

		require.Zero(t, countAllJobs(t, h.store), "a failed enqueue stores nothing, the one whose middleware called next twice included")
	})
}

func TestNilMiddlewareIsRefusedAtSetup(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		_, err := jobs.NewWorker(testdb.Public(h.store), h.reg, jobs.WorkerConfig{Middleware: []jobs.Middleware{nil}})
		require.ErrorContains(t, err, "Middleware 0 is nil")
		err = jobs.Register(h.reg, func(context.Context, *jobs.Job[noop]) error { return nil }, jobs.WithMiddleware(nil))
		require.ErrorContains(t, err, "WithMiddleware: middleware 0 is nil")
	})
}

func TestEachRunHasALoggerWithTheJob(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var buf bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewJSONHandler(&syncWriter{mu: &mu, w: &buf}, nil))
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[noop]) error {
			jobs.Logger(ctx).Info("working", "n", j.Args.N)
			return nil
		}))
		id := h.enqueue(noop{N: 4}, jobs.Queue("default"))
		h.drain(jobs.WorkerConfig{Logger: log, Middleware: []jobs.Middleware{func(ctx context.Context, _ jobs.JobInfo, next func(context.Context) error) error {
			return next(jobs.WithLogger(ctx, jobs.Logger(ctx).With("trace_id", "abc")))
		}}})
		var line map[string]any
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if strings.Contains(l, `"working"`) {
				require.NoError(t, json.Unmarshal([]byte(l), &line))
			}
		}
		require.NotNil(t, line, buf.String())
		require.Equal(t, float64(id), line["job_id"])
		require.Equal(t, "noop", line["kind"])
		require.Equal(t, "default", line["queue"])
		require.Equal(t, float64(1), line["attempt"])
		require.Equal(t, "abc", line["trace_id"])
		require.Equal(t, float64(4), line["n"])
		require.Same(t, slog.Default(), jobs.Logger(context.Background()), "outside a run: the default logger")
	})
}

type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// A job that is still running when shutdown releases it tells its
// middleware, which may close what it opened for the run; one that returns
// in time does not.
func TestOnReleaseTellsMiddlewareOfAJobReleasedAtShutdown(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan int, 2)
		unblock := make(chan struct{})
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[noop]) error {
			started <- j.Args.N
			if j.Args.N == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			<-unblock // ignores its context
			return nil
		}))
		var mu sync.Mutex
		released := map[int64]bool{}
		verdicts := map[int64]jobs.Outcome{}
		stopped := map[int64]bool{}
		returned := make(chan struct{}, 2)
		mw := func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
			stop := jobs.OnRelease(ctx, func() { mu.Lock(); released[job.ID] = true; mu.Unlock() })
			err := next(ctx)
			s := stop()
			mu.Lock()
			verdicts[job.ID], stopped[job.ID] = jobs.Classify(ctx, job, err).Outcome, s
			mu.Unlock()
			returned <- struct{}{}
			return err
		}
		cooperative := h.enqueue(noop{N: 1})
		stubborn := h.enqueue(noop{N: 2})
		w := h.worker(jobs.WorkerConfig{ShutdownTimeout: 30 * time.Second, PollInterval: time.Hour, JobTimeout: -1, Middleware: []jobs.Middleware{mw}})
		stop := h.run(w)
		receive(t, started, 2)
		go func() {
			<-h.clock.WaitForTimerAt(t0.Add(30 * time.Second))
			h.clock.Advance(30 * time.Second)
			<-h.clock.WaitForTimerAt(t0.Add(31 * time.Second))
			<-returned // the cooperative job returned within the grace
			h.clock.Advance(time.Second)
		}()
		stop()
		mu.Lock()
		require.True(t, released[stubborn], "the stubborn job's middleware heard of its release")
		require.False(t, released[cooperative], "the cooperative one returned in time")
		require.Equal(t, jobs.OutcomeReleased, verdicts[cooperative])
		require.True(t, stopped[cooperative])
		mu.Unlock()
		close(unblock)
		require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); _, ok := stopped[stubborn]; return ok }, 10*time.Second, time.Millisecond)
		mu.Lock()
		require.False(t, stopped[stubborn], "stop after the release reports it came too late")
		mu.Unlock()
		require.Equal(t, engine.StateReady, h.job(stubborn).State)
	})
}

func TestClassifySaysWhatTheWorkerMakesOfAnError(t *testing.T) {
	ctx := context.Background()
	job := jobs.JobInfo{Attempt: 1, MaxAttempts: 2}
	require.Equal(t, jobs.Verdict{Outcome: jobs.OutcomeCompleted}, jobs.Classify(ctx, job, nil))
	require.Equal(t, jobs.Verdict{Outcome: jobs.OutcomeSnoozed, Wait: time.Minute, Reason: "job snoozed for 1m0s"}, jobs.Classify(ctx, job, jobs.Snooze(time.Minute)))
	v := jobs.Classify(ctx, job, jobs.RetryAfter(30*time.Second))
	require.Equal(t, jobs.OutcomeThrottled, v.Outcome)
	require.Equal(t, 30*time.Second, v.Wait)
	require.Equal(t, jobs.Verdict{Outcome: jobs.OutcomeCancelled, Reason: "gone"}, jobs.Classify(ctx, job, jobs.Cancel(errors.New("gone"))))
	require.Equal(t, jobs.Verdict{Outcome: jobs.OutcomeRetried, Reason: "boom"}, jobs.Classify(ctx, job, errors.New("boom")))
	job.Attempt = 2
	require.Equal(t, jobs.OutcomeFailed, jobs.Classify(ctx, job, errors.New("boom")).Outcome)
}

// Enqueue middleware wraps EnqueueTx too: the metadata it writes commits
// (or rolls back) with the caller's transaction.
func TestEnqueueMiddlewareWrapsEnqueueTx(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Declare[email](h.reg))
		calls := 0
		stamp := func(ctx context.Context, js []*jobs.EnqueueJob, next func(context.Context) error) error {
			calls++
			js[0].SetMetadata("via", "tx")
			return next(ctx)
		}
		c := jobs.NewClient(testdb.Public(h.store), h.reg, jobs.ClientConfig{Clock: h.clock, Middleware: []jobs.EnqueueMiddleware{stamp}})
		tx, commit, _ := callerTx(t, h.store)
		res, err := c.EnqueueTx(ctx, tx, email{To: "a"})
		require.NoError(t, err)
		commit()
		require.Equal(t, 1, calls)
		require.JSONEq(t, `{"via":"tx"}`, h.job(res.ID).Metadata)

		tx, _, rollback := callerTx(t, h.store)
		res, err = c.EnqueueTx(ctx, tx, email{To: "b"})
		require.NoError(t, err)
		rollback()
		_, err = h.store.GetJob(ctx, res.ID)
		require.ErrorIs(t, err, engine.ErrNotFound)
	})
}
