package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Passing probe. dashboard.md: "Pages are keyset pages by id
// (?before=ID), never OFFSET". While jobs are enqueued, claimed and
// completed beside it, paging through a filter shows no job twice, and
// every job that matched the filter all along exactly once: paged by
// queue and state (ready jobs leave it as they are claimed, new ones
// join it above the first page), and by kind alone (every job stays).
func TestKeysetPagesNeitherRepeatNorSkipUnderChurn(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		batch := make([]engine.NewJob, 300)
		for i := range batch {
			batch[i] = job("k", "q", i%3)
		}
		initial := enqueue(t, s, t0, batch...)
		pid := register(t, s, t0)

		var mu sync.Mutex
		claimed := map[int64]bool{}
		stop := make(chan struct{})
		churned := make(chan error, 1)
		go func() {
			churned <- func() error {
				for {
					select {
					case <-stop:
						return nil
					default:
					}
					if _, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{job("k", "q", 0), job("k", "q", 2), job("k", "q", 1)}); err != nil {
						return err
					}
					res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"q"}, Max: 4, Clock: engine.At(t0)})
					if err != nil {
						return err
					}
					mu.Lock()
					for _, j := range res.Jobs {
						claimed[j.ID] = true
					}
					mu.Unlock()
					if err := s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runsOf(res.Jobs)}); err != nil {
						return err
					}
				}
			}()
		}()

		page := func(f engine.JobPage) map[int64]int {
			seen := map[int64]int{}
			for {
				js, next, err := s.PageJobs(ctx, f)
				require.NoError(t, err)
				for _, j := range js {
					seen[j.ID]++
					if f.State != "" {
						require.Equal(t, f.State, j.State, "job %d is shown under a state it is not in", j.ID)
					}
				}
				if next == 0 {
					return seen
				}
				f.Before = next
			}
		}
		ready := page(engine.JobPage{Queue: "q", State: engine.StateReady, Limit: 7})
		all := page(engine.JobPage{Kind: "k", Limit: 11})
		close(stop)
		require.NoError(t, <-churned)

		for id, n := range ready {
			require.Equal(t, 1, n, "job %d is shown %d times", id, n)
		}
		for id, n := range all {
			require.Equal(t, 1, n, "job %d is shown %d times", id, n)
		}
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, claimed, "jobs were claimed while the pages were read")
		for _, id := range initial {
			require.Equal(t, 1, all[id], "job %d, there all along, is shown once by kind", id)
			if !claimed[id] {
				require.Equal(t, 1, ready[id], "job %d, ready all along, is shown once among the ready", id)
			}
		}
	})
}

// Passing probe. operations.md, "Cleaning up": completed and cancelled
// jobs are kept for the retention, then deleted in batches; "failed jobs
// are kept until retried or cancelled". A backlog of 1,050 old completed
// jobs goes in batches of 100 (the count returned is exact), with the
// kept attempts and collected calls of the jobs deleted; a failed job,
// a job finished after the cut, and a cancelled job an operator retried
// (ready now, finished long ago) stay; and the counts, pages and job
// reads after it say so.
func TestCleanupDeletesExactlyTheOldCompletedAndCancelled(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		const backlog = 1050
		bulk := make([]engine.NewJob, backlog)
		for i := range bulk {
			bulk[i] = job("k", "bulk", 0)
		}
		enqueue(t, s, t0, bulk...)
		for done := 0; done < backlog; {
			res := claim(t, s, pid, t0, 500, "bulk")
			require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runsOf(res.Jobs)}))
			done += len(res.Jobs)
		}

		// In queue default: a job with a kept failed attempt, then
		// completed; a coalescing job with collected calls, completed;
		// a failed job; one completed after the cut; one cancelled and
		// then retried by an operator; one cancelled.
		retried := enqueue(t, s, t0, job("k", "default", 0))[0]
		res := claim(t, s, pid, t0, 10)
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: ran(t, s,
			engine.Transition{ID: retried, State: engine.StateScheduled, RunAt: t0.Add(time.Second), Error: "boom"})}))
		require.Len(t, res.Jobs, 1)
		promote(t, s, t0.Add(time.Second))
		res = claim(t, s, pid, t0.Add(time.Second), 10)
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0.Add(time.Second)), engine.Outcomes{Completed: runsOf(res.Jobs)}))
		as, err := s.Attempts(ctx, retried)
		require.NoError(t, err)
		require.Len(t, as, 1)

		coalesced := collected(t, s, "x", 3)
		res = claim(t, s, pid, t0, 10)
		require.Equal(t, []int64{coalesced}, ids(res.Jobs))
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runsOf(res.Jobs), WithCalls: runsOf(res.Jobs)}))
		require.Equal(t, 2, calls(t, s, coalesced))

		more := enqueue(t, s, t0, job("k", "default", 0), job("k", "default", 0), job("k", "default", 0), job("k", "default", 0))
		failed, recent, revived, cancelled := more[0], more[1], more[2], more[3]
		res = claim(t, s, pid, t0, 2)
		require.ElementsMatch(t, []int64{failed, recent}, ids(res.Jobs))
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: ran(t, s,
			engine.Transition{ID: failed, State: engine.StateFailed, Error: "gave up", Finished: true})}))
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0.Add(2*time.Hour)), engine.Outcomes{Completed: runs(t, s, recent)}))
		_, err = s.CancelJobs(ctx, engine.At(t0), []int64{revived, cancelled}, "")
		require.NoError(t, err)
		moved, err := s.RetryJobs(ctx, engine.At(t0.Add(3*time.Hour)), []int64{revived})
		require.NoError(t, err)
		require.Equal(t, []engine.Moved{{ID: revived, State: engine.StateReady}}, moved)

		n, err := s.DeleteFinished(ctx, t0.Add(time.Hour), 100)
		require.NoError(t, err)
		require.Equal(t, backlog+3, n, "the backlog, the retried-then-completed, the coalesced and the cancelled job")
		for _, id := range []int64{retried, coalesced, cancelled} {
			_, err := s.GetJob(ctx, id)
			require.ErrorIs(t, err, engine.ErrNotFound, "job %d", id)
		}
		as, err = s.Attempts(ctx, retried)
		require.NoError(t, err)
		require.Empty(t, as, "kept attempts go with their job")
		require.Zero(t, calls(t, s, coalesced), "collected calls go with their job")
		for id, want := range map[int64]engine.State{failed: engine.StateFailed, recent: engine.StateCompleted, revived: engine.StateReady} {
			require.Equal(t, want, state(t, s, id).State, "job %d is kept", id)
		}

		st, err := s.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, []engine.QueueStats{{Queue: "default", Counts: map[engine.State]int64{
			engine.StateFailed: 1, engine.StateCompleted: 1, engine.StateReady: 1}}}, st)
		js, next, err := s.PageJobs(ctx, engine.JobPage{Limit: 50})
		require.NoError(t, err)
		require.Zero(t, next)
		require.ElementsMatch(t, []int64{failed, recent, revived}, infoIDs(js))
		c, err := s.CountJobs(ctx, engine.JobPage{State: engine.StateCompleted}, 100)
		require.NoError(t, err)
		require.Equal(t, int64(1), c.N)

		// Nothing more is old enough.
		n, err = s.DeleteFinished(ctx, t0.Add(time.Hour), 100)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

func infoIDs(js []*engine.JobInfo) []int64 {
	out := make([]int64, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

// pausingDB is a pool whose transactions stop before they delete kept
// attempts (the cleaner's second statement, once it has locked and read
// its batch of finished jobs) until release is closed, having said so
// on paused.
type pausingDB struct {
	engine.DB
	paused  chan struct{}
	release chan struct{}
	once    *sync.Once
}

func (p pausingDB) Begin(ctx context.Context) (engine.Tx, error) {
	tx, err := p.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pausingTx{Tx: tx, p: p}, nil
}

type pausingTx struct {
	engine.Tx
	p pausingDB
}

func (t pausingTx) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	if strings.Contains(q, "DELETE FROM sluice_attempts") {
		t.p.once.Do(func() { close(t.p.paused) })
		select {
		case <-t.p.release:
		case <-ctx.Done():
			return engine.Result{}, ctx.Err()
		}
	}
	return t.Tx.Exec(ctx, q, args...)
}

// Passing probe. architecture.md: the claim's indexes "hold only
// claimable rows", and finished jobs sit where no claim reads. While the
// cleaner holds a batch of old finished jobs locked (its transaction
// stopped between reading the batch and deleting it), an enqueue, a
// claim, the completion of the claimed job, an operator's retry of a
// failed job and a dashboard page all go through on PostgreSQL and
// MySQL, whose claims lock rows one by one. (SQLite has one writer: a
// batch of the cleaner holds the others back for its one transaction,
// as every write does.)
func TestCleanupHoldsNoLockAClaimWaitsFor(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: the cleaner's batch holds every other write back, by design")
		}
		ctx := context.Background()
		pid := register(t, s, t0)
		old := make([]engine.NewJob, 300)
		for i := range old {
			old[i] = job("k", "default", 0)
		}
		enqueue(t, s, t0, old...)
		res := claim(t, s, pid, t0, 300)
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runsOf(res.Jobs)}))
		failed := enqueue(t, s, t0, job("k", "default", 0))[0]
		require.Equal(t, []int64{failed}, ids(claim(t, s, pid, t0, 10).Jobs))
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: ran(t, s,
			engine.Transition{ID: failed, State: engine.StateFailed, Error: "gave up", Finished: true})}))

		p := pausingDB{DB: s.DB(), paused: make(chan struct{}), release: make(chan struct{}), once: &sync.Once{}}
		cleaner := engine.New(s.Dialect(), p)
		deleted := make(chan error, 1)
		go func() {
			_, err := cleaner.DeleteFinished(ctx, t0.Add(time.Hour), 500)
			deleted <- err
		}()
		<-p.paused
		released := false
		defer func() {
			if !released {
				close(p.release)
				<-deleted
			}
		}()

		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		got, err := s.Enqueue(tctx, nil, engine.At(t0), []engine.NewJob{job("k", "default", 0)})
		require.NoError(t, err, "an enqueue beside the cleaner's batch")
		cr, err := s.Claim(tctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 10, Clock: engine.At(t0)})
		require.NoError(t, err, "a claim beside the cleaner's batch")
		require.Equal(t, []int64{got[0].ID}, ids(cr.Jobs))
		require.NoError(t, s.Finish(tctx, pid, engine.At(t0), engine.Outcomes{Completed: runsOf(cr.Jobs)}), "a completion beside it")
		_, err = s.RetryJobs(tctx, engine.At(t0), []int64{failed})
		require.NoError(t, err, "an operator's retry beside it")
		_, _, err = s.PageJobs(tctx, engine.JobPage{State: engine.StateCompleted, Limit: 50})
		require.NoError(t, err, "a page of completed jobs beside it")
		require.False(t, errors.Is(tctx.Err(), context.DeadlineExceeded))

		close(p.release)
		released = true
		require.NoError(t, <-deleted)
	})
}
