package dispatcher_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// quietTB is a testing.TB whose Errorf only records that it was called:
// testdb.WaitForLockWaits fails its TB when no statement waits, which here
// is the outcome the test hopes for.
type quietTB struct {
	testing.TB
	mu     sync.Mutex
	failed bool
}

func (q *quietTB) Helper() {}

func (q *quietTB) Errorf(string, ...any) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.failed = true
}

// tickWaitsForALock runs d.Tick and reports whether it waited for a row
// lock on table (a statement with parts waited) before it returned: the
// tick either returns (no wait), or a lock wait shows first. It lets the
// tick go by calling release (the holder's rollback) once it saw a wait,
// and waits for the tick's end either way.
func tickWaitsForALock(t *testing.T, s *engine.Store, d *dispatcher.Dispatcher, release func(), table string, parts ...string) (waited bool, took time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := d.Tick(context.Background())
		done <- err
	}()
	seen := make(chan bool, 1)
	go func() {
		q := &quietTB{TB: t}
		seen <- testdb.WaitForLockWaits(q, s, 1, table, parts...)
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
		return false, time.Since(start)
	case <-seen:
		// A wait was seen, or none in 10 s while the tick still runs:
		// either way the tick is stuck.
		waited = true
	}
	// Still stuck: hold the lock a little longer to show that the tick
	// waits for as long as the holder's transaction lasts, then end it.
	select {
	case err := <-done:
		require.NoError(t, err)
		return false, time.Since(start)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	require.NoError(t, <-done)
	return waited, time.Since(start)
}

// docs/guarantees.md: "A promotion waits for no such lock either ... the
// others, unlimited ones too, are promoted at once"; docs/concurrency.md
// (Lost slots): a key whose holder is presumed lost "is freed by the
// dispatcher", and the dispatcher's ticks promote and unpark every second.
//
// The dispatcher's built-in sluice.free_expired_slots
// (MaintainSemaphores) runs inline in every round of Run, after the
// promotion: it reads the expired keys unlocked and then locks their
// semaphores with a plain FOR UPDATE, waiting. A key whose Duration ran
// out while an app's open transaction holds its row (the app enqueued a
// job of the key with EnqueueTx; the key's one running job's worker died,
// or is slow) makes that statement wait for the app's transaction to end:
// the round never ends, so for as long as the app's transaction lasts (on
// PostgreSQL without end, on MySQL up to innodb_lock_wait_timeout, 50 s,
// then the tick fails and the next round waits again) the dispatcher
// promotes no due job, unparks nothing, frees no other key's lost slots
// and fires no cron task, of any key or queue.
//
// Here key k (To 1, Duration 1 minute) has a job claimed at 12:00 that
// never finishes, and an app's transaction enqueued another job of k
// (blocked) and stays open. At 12:05 the dispatcher ticks: the tick
// should end without waiting for the app (k is left to a later tick, as a
// promotion and a reap leave a held key); it waits for the app's lock.
func TestFreeingExpiredSlotsWaitsForNoAppTransactionHoldingTheKey(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			t.Skip("one writer: an open transaction of the app's stops every write")
		}
		ctx := context.Background()
		conc := &engine.Conc{Key: "k", To: 1, Duration: time.Minute}
		_, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3, Conc: conc}})
		require.NoError(t, err)
		pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", PID: 1}, engine.At(t0))
		require.NoError(t, err)
		cl, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 1, Clock: engine.At(t0)})
		require.NoError(t, err)
		require.Len(t, cl.Jobs, 1)

		app := open()
		tx, err := app.DB().Begin(ctx)
		require.NoError(t, err)
		_, err = app.Enqueue(ctx, tx, engine.At(t0.Add(time.Minute)), []engine.NewJob{{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3, Conc: conc}})
		require.NoError(t, err)
		var once sync.Once
		release := func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
		defer release()

		c := clock.NewFake(t0.Add(5 * time.Minute))
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet()})
		c.Advance(2 * time.Second) // free_expired_slots is due
		waited, took := tickWaitsForALock(t, s, d, release, "sluice_semaphores", "sluice_semaphores")
		if waited {
			t.Errorf("the dispatcher's tick waited %v, until the app's transaction ended, for the semaphore of key k it holds (free_expired_slots): every other key's and queue's promotions, unparks and cron ticks wait with it", took.Round(time.Millisecond))
		}
	})
}

type synced struct {
	Account string `json:"account"`
}

func (synced) Kind() string { return "synced" }

// docs/guarantees.md: "A promotion waits for no such lock either (the
// dispatcher's ...)"; docs/recurring.md: the dispatcher's rounds run the
// cron tasks whose ticks came.
//
// A cron task's tick enqueues its job in the dispatcher's round, inline
// (only the built-in clean-ups run beside the rounds). A task whose kind
// has a concurrency limit enqueues a job that takes its key's semaphore,
// waiting for its lock: while an app's open transaction holds that key
// (it enqueued a job of the account with EnqueueTx), the round waits for
// it, and with it every promotion, unpark, expiry and other cron task of
// the dispatcher, of every key and queue, for as long as the app's
// transaction lasts.
//
// Here the task "sync-acme" enqueues synced{acme} every minute, its kind
// limited to one per account; an app's transaction enqueued
// synced{acme} and stays open. The tick at 12:01 does not wait for the
// app: its enqueue fails without waiting, rolling back the tick's record,
// and the tick is tried again on the next round, which, once the app's
// transaction ended, enqueues its one job.
func TestACronTaskOfAHeldKeyDoesNotHoldUpTheDispatchersRound(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			t.Skip("one writer: an open transaction of the app's stops every write")
		}
		ctx := context.Background()
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[synced](reg, jobs.Queue("sync"), jobs.ConcurrencyLimit(concurrency.Limit[synced]{
			Key: func(a synced) any { return a.Account }, To: 1, Duration: time.Hour,
		})))
		c := clock.NewFake(t0) // 12:00
		client := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: c})

		// The key the client stores for acme, read off a job it enqueued.
		first, err := client.Enqueue(ctx, synced{Account: "probe"})
		require.NoError(t, err)
		info, err := s.GetJob(ctx, first.ID)
		require.NoError(t, err)
		require.NotNil(t, info.Conc)
		key := fmt.Sprintf("%sacme", info.Conc.Key[:len(info.Conc.Key)-len("probe")])

		app := open()
		tx, err := app.DB().Begin(ctx)
		require.NoError(t, err)
		_, err = app.Enqueue(ctx, tx, engine.At(t0), []engine.NewJob{{Kind: "synced", Queue: "sync", Args: []byte(`{"account":"acme"}`), MaxAttempts: 3,
			Conc: &engine.Conc{Key: key, To: 1, Duration: time.Hour}}})
		require.NoError(t, err)
		var once sync.Once
		release := func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
		defer release()

		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Client: client, Tasks: []dispatcher.Task{
			{Key: "sync-acme", Schedule: "* * * * *", Args: synced{Account: "acme"}},
		}})
		c.Advance(time.Minute) // 12:01: the task's tick
		waited, took := tickWaitsForALock(t, s, d, release, "sluice_semaphores", "sluice_semaphores")
		if waited {
			t.Fatalf("the dispatcher's tick waited %v, until the app's transaction ended, to enqueue the cron task's job of the key the app holds: every other promotion, unpark and task waits with it", took.Round(time.Millisecond))
		}
		// The tick left no record and no job: it is tried again.
		last, err := s.LastTicks(ctx)
		require.NoError(t, err)
		require.NotContains(t, last, "sync-acme", "a tick whose enqueue met a held key is recorded without its job")
		js, err := s.ListJobs(ctx, engine.JobFilter{Kind: "synced", Limit: 10})
		require.NoError(t, err)
		require.Len(t, js, 1, "only the probe: the held key's tick enqueued a job")

		// Once the app's transaction ended, the next round runs the same
		// tick, once.
		release()
		c.Advance(time.Second)
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		c.Advance(time.Second)
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		last, err = s.LastTicks(ctx)
		require.NoError(t, err)
		require.Equal(t, t0.Add(time.Minute), last["sync-acme"].RunAt.UTC(), "the tick after the key was freed")
		js, err = s.ListJobs(ctx, engine.JobFilter{Kind: "synced", Limit: 10})
		require.NoError(t, err)
		require.Len(t, js, 2, "the probe and the tick's one job")
		job, err := s.GetJob(ctx, last["sync-acme"].JobID)
		require.NoError(t, err)
		require.JSONEq(t, `{"account":"acme"}`, string(job.Args))
	})
}
