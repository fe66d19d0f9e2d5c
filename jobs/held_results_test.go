package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// heldKey is a test of a result that gives a slot back to a key an app's
// open transaction holds: account 1's job a (To 1) runs until released;
// the app then enqueues account 1's job b in its transaction, left open
// (b is blocked behind a, and the transaction holds the key's
// semaphore).
type heldKey struct {
	h        *harness
	started  chan int
	release  chan struct{}
	a, b     int64
	tx       any
	commit   func()
	rollback func()
	ended    bool
}

// newHeldKey registers account jobs (To 1; the one with N 1 waits for
// release) and plain ones, enqueues account 1's job a, and returns once
// w has started it and the app's transaction enqueued b. run starts w.
// It skips SQLite, whose one writer an open transaction of the app's
// stops.
func newHeldKey(t *testing.T, h *harness, run func()) *heldKey {
	t.Helper()
	if h.store.Dialect().Name() == "sqlite" {
		t.Skip("one writer: an open transaction of the app's stops every write")
	}
	k := &heldKey{h: h, started: make(chan int, 8), release: make(chan struct{})}
	require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[accountJob]) error {
		k.started <- j.Args.N
		if j.Args.N == 1 {
			<-k.release
		}
		return nil
	}, jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: func(a accountJob) any { return a.Account }, To: 1})))
	require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[ctxJob]) error {
		k.started <- 0
		return nil
	}))
	k.a = h.enqueue(accountJob{Account: 1, N: 1})
	t.Cleanup(func() {
		select {
		case <-k.release:
		default:
			close(k.release)
		}
	})
	if run != nil {
		run()
		require.Equal(t, []int{1}, receive(t, k.started, 1))
	}
	k.begin(t)
	return k
}

// begin opens the app's transaction and enqueues b in it.
func (k *heldKey) begin(t *testing.T) {
	t.Helper()
	k.tx, k.commit, k.rollback = callerTx(t, k.h.store)
	t.Cleanup(func() {
		if !k.ended {
			k.rollback()
		}
	})
	res, err := k.h.client.EnqueueTx(context.Background(), k.tx, accountJob{Account: 1, N: 2})
	require.NoError(t, err)
	k.b = res.ID
}

// end commits the app's transaction.
func (k *heldKey) end() {
	k.ended = true
	k.commit()
}

// state returns job id's state, whether it holds a slot, and its attempt.
func (k *heldKey) state(id int64) (engine.State, bool, int) {
	j := k.h.job(id)
	return j.State, j.HoldsSlot, j.Attempt
}

// eventually waits for job id to reach want.
func (k *heldKey) eventually(t *testing.T, id int64, want engine.State, msg string) {
	t.Helper()
	require.Eventually(t, func() bool { return k.h.job(id).State == want }, 20*time.Second, time.Millisecond,
		"%s: job %d is %s", msg, id, k.h.job(id).State)
}

// stopWhileHeld runs w (a Run) with a held key (newHeldKey), lets a's
// handler return, so that its result waits for the app's transaction,
// and stops w: it returns once a's result waits for the key, with what
// Run returns to come on the channel.
func stopWhileHeld(t *testing.T, h *harness, w *jobs.Worker) (*heldKey, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	k := newHeldKey(t, h, func() { go func() { done <- w.Run(ctx) }() })
	close(k.release)
	cancel()
	awaitFinishWait(t, h)
	return k, done
}

// drained is what a Drain returned.
type drained struct {
	res jobs.DrainResult
	err error
}

// drainAsync drains w in a goroutine, and sends what it returned.
func drainAsync(ctx context.Context, w *jobs.Worker) <-chan drained {
	done := make(chan drained, 1)
	go func() {
		res, err := w.Drain(ctx)
		done <- drained{res, err}
	}()
	return done
}

// within returns what ch yields, failing the test as what says if it
// yields nothing within 30 s.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal(what)
		panic("unreachable")
	}
}

// awaitFinishWait waits until a statement waits for a semaphore's lock:
// the write of a result that waits for the app's transaction.
func awaitFinishWait(t *testing.T, h *harness) {
	t.Helper()
	testdb.WaitForLockWaits(t, h.store, 1, "sluice_semaphores", "sluice_semaphores")
}

// docs/concurrency.md, How slots move: a result whose slot goes back to a
// key an app's open transaction holds waits for that key alone. While it
// waits, a's job stays running, holding its slot, and an unrelated job's
// result lands; once the app commits, a's result lands at the worker's
// next try (HeldRetryFirst on its clock), giving the slot to b, which
// runs: the key's count stays right throughout.
func TestAHeldKeysResultLandsOnceTheAppsTransactionEnds(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		w := h.worker(jobs.WorkerConfig{Concurrency: 4, PollInterval: time.Hour})
		var stop func()
		k := newHeldKey(t, h, func() { stop = h.run(w) })
		defer stop()

		close(k.release)
		plain := h.enqueue(ctxJob{})
		require.Equal(t, []int{0}, receive(t, k.started, 1))
		k.eventually(t, plain, engine.StateCompleted, "an unrelated result waits for no held key")
		st, holds, _ := k.state(k.a)
		require.Equal(t, engine.StateRunning, st, "a's result waits for its key")
		require.True(t, holds)
		require.Equal(t, 1, semaphoreOf(t, h, "account_job/1").Held)

		retry := h.clock.WaitForTimerAt(h.clock.Now().Add(jobs.HeldRetryFirst))
		k.end()
		<-retry
		h.clock.Advance(jobs.HeldRetryFirst)
		k.eventually(t, k.a, engine.StateCompleted, "a's result lands once the key is free")
		require.Equal(t, []int{2}, receive(t, k.started, 1), "b got a's slot and runs")
		k.eventually(t, k.b, engine.StateCompleted, "b ran")
		sem := semaphoreOf(t, h, "account_job/1")
		require.Zero(t, sem.Held, "each slot given back once")
		require.Zero(t, sem.Holding)
	})
}

// A worker that stops while a result waits for a key an app's open
// transaction holds waits for the key, up to its ShutdownTimeout: the
// result lands as soon as the app commits, with no clock advanced, and
// Run returns.
func TestAStoppingWorkerWritesAHeldKeysResultOnceTheAppsTransactionEnds(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		w := h.worker(jobs.WorkerConfig{Concurrency: 4, PollInterval: time.Hour})
		k, done := stopWhileHeld(t, h, w)
		select {
		case err := <-done:
			t.Fatalf("Run returned (%v) while a's result waited for its key", err)
		default:
		}
		st, _, _ := k.state(k.a)
		require.Equal(t, engine.StateRunning, st)
		k.end()
		require.NoError(t, within(t, done, "Run did not return once the key was free"))
		st, _, _ = k.state(k.a)
		require.Equal(t, engine.StateCompleted, st, "a's result landed")
		st, holds, _ := k.state(k.b)
		require.Equal(t, engine.StateReady, st, "b got a's slot")
		require.True(t, holds)
		require.Equal(t, 1, semaphoreOf(t, h, "account_job/1").Held)
	})
}

// A worker that stops while a result waits for a key an app's
// transaction holds past its ShutdownTimeout returns then: the job is
// released back to ready, its attempt given back, holding its slot, to
// run again (rather than stay running for a process that is gone).
func TestAStoppingWorkerReleasesAJobWhoseKeyStaysHeldPastItsShutdownTimeout(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		w := h.worker(jobs.WorkerConfig{Concurrency: 4, PollInterval: time.Hour, ShutdownTimeout: 5 * time.Second})
		k, done := stopWhileHeld(t, h, w)
		h.clock.Advance(5 * time.Second)
		require.NoError(t, within(t, done, "Run did not return at its shutdown timeout"))
		st, holds, attempt := k.state(k.a)
		require.Equal(t, engine.StateReady, st, "a is released to run again")
		require.True(t, holds, "a keeps its slot")
		require.Zero(t, attempt, "its attempt is given back")
		k.rollback()
		k.ended = true
		require.Equal(t, 1, semaphoreOf(t, h, "account_job/1").Held)
	})
}

// Drain writes each result as its job ends, but one whose slot goes back
// to a key an app's open transaction holds: that one waits while the
// drain runs the other jobs (whose results land), then, with no job
// left, the drain waits for the key, writes it as soon as the app
// commits, and runs the job it gave the slot to.
func TestDrainWritesAHeldKeysResultOnceTheAppsTransactionEnds(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		k := newHeldKey(t, h, nil)
		close(k.release)
		plain := h.enqueue(ctxJob{})
		done := drainAsync(context.Background(), h.worker(jobs.WorkerConfig{Concurrency: 4}))
		awaitFinishWait(t, h)
		st, holds, _ := k.state(k.a)
		require.Equal(t, engine.StateRunning, st, "a's result waits for its key")
		require.True(t, holds)
		st, _, _ = k.state(plain)
		require.Equal(t, engine.StateCompleted, st, "the plain job's result landed")
		k.end()
		d := within(t, done, "Drain did not return once the key was free")
		require.NoError(t, d.err)
		require.Equal(t, 3, d.res.Completed, "a, the plain job, and b")
		for _, id := range []int64{k.a, plain, k.b} {
			st, _, _ := k.state(id)
			require.Equal(t, engine.StateCompleted, st, "job %d", id)
		}
		require.Zero(t, semaphoreOf(t, h, "account_job/1").Held)
	})
}

// A drain whose context ends while a result waits for a held key returns
// the context's error, and releases that job to run again, holding its
// slot, rather than leave it running for a process that is gone.
func TestADrainStoppedWhileAResultWaitsForAHeldKeyReleasesItsJob(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		k := newHeldKey(t, h, nil)
		close(k.release)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := drainAsync(ctx, h.worker(jobs.WorkerConfig{Concurrency: 4}))
		awaitFinishWait(t, h)
		cancel()
		require.ErrorIs(t, within(t, done, "Drain did not return once its context ended").err, context.Canceled)
		st, holds, attempt := k.state(k.a)
		require.Equal(t, engine.StateReady, st, "a is released to run again")
		require.True(t, holds)
		require.Zero(t, attempt)
		k.end()
		require.Equal(t, 1, semaphoreOf(t, h, "account_job/1").Held, "a holds the key's slot; b is blocked behind it")
		st, _, _ = k.state(k.b)
		require.Equal(t, engine.StateBlocked, st)
	})
}
