package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A call looks for the pending job of its key at the moment another
// transaction holds that job and is about to release its key: a claim
// (which marks it running) or an operator's cancel. On MySQL a locking
// read through the coalesce index locks the key's index entry, then the
// job, while the holder locked the job first and must lock the entry to
// release it: the call, in the caller's own transaction (which sluice
// cannot run again), got a deadlock back. The call now waits for the job
// without holding the entry; the holder commits, and the call, finding the
// key released, creates a new pending job. (Before, InnoDB broke the
// cycle by failing one of the two: the caller's transaction, or the
// holder's, which sluice ran again.)
func TestACallNeverDeadlocksWithATransactionReleasingItsPendingJob(t *testing.T) {
	for _, tc := range []struct {
		name    string
		holding string // what the holder's releasing statement contains
		release func(t *testing.T, s *engine.Store, pid, p int64)
		state   engine.State
	}{
		{"claim", "SET state = 'running'", func(t *testing.T, s *engine.Store, pid, p int64) {
			require.Equal(t, []int64{p}, ids(claim(t, s, pid, t0, 1).Jobs))
		}, engine.StateRunning},
		{"cancel", "new_state", func(t *testing.T, s *engine.Store, _, p int64) {
			moved, err := s.CancelJobs(context.Background(), engine.At(t0), []int64{p}, "")
			require.NoError(t, err)
			require.Len(t, moved, 1)
		}, engine.StateCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
				if !s.Dialect().Capabilities().RowLocks {
					return // SQLite: one writer at a time, nothing to interleave
				}
				ctx := context.Background()
				call := func() engine.NewJob {
					j := job("k", "default", 0)
					j.Coalesce = &engine.Coalesce{Key: "co/p", Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard}}
					return j
				}
				p := enqueue(t, s, t0, call())[0]
				pid := register(t, s, t0)

				caller := open()
				var res []engine.Enqueued
				var wait func() error
				rh, recH := testdb.Record(s)
				recH.Before = func(stmt string) {
					if wait != nil || !strings.Contains(stmt, tc.holding) {
						return
					}
					// The holder has locked P and is about to release its
					// key: the call comes now, and the holder goes on once
					// the call waits for a lock (or has finished).
					wait = testdb.CallWhileHeld(t, s, caller, func(tx engine.Tx) (err error) {
						res, err = caller.Enqueue(ctx, tx, engine.At(t0), []engine.NewJob{call()})
						return err
					})
				}
				tc.release(t, rh, pid, p)
				require.NotNil(t, wait, "the holder never released the key")
				require.NoError(t, wait(), "the caller's transaction never gets a deadlock back")
				require.Equal(t, 1, testdb.Count(recH.Take(), tc.holding), "the holder ran once: no deadlock failed it")
				require.Len(t, res, 1)
				require.False(t, res[0].Joined, "the call joined a job no longer pending")
				require.NotEqual(t, p, res[0].ID)
				require.Equal(t, tc.state, state(t, s, p).State)
				require.Equal(t, engine.StateReady, state(t, s, res[0].ID).State)
			})
		})
	}
}

// A call that creates the pending job of a new key, beside a claim that
// releases another key's job, while entries of the new key that released
// jobs left are still in the coalesce index (InnoDB purges them later; an
// old snapshot keeps them, as a long read or a busy server does). On MySQL
// the index was unique, so the insert checked those entries and locked
// the gap before them, where a claim writes the NULL of the key it
// releases when its job is the newest without a key: the claim waited for
// the call, which waited for the claim's job (its second key). The index
// is no longer unique (one pending job per key is kept by the key's row
// the call locks), so the insert locks no gap.
func TestACallCreatingAKeyNeverDeadlocksWithAClaimReleasingAnother(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			return // SQLite: one writer at a time, nothing to interleave
		}
		ctx := context.Background()
		call := func(key string) engine.NewJob {
			j := job("k", "default", 0)
			j.Coalesce = &engine.Coalesce{Key: key, Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard}}
			return j
		}
		pid := register(t, s, t0)
		old := enqueue(t, s, t0, call("co/a"))[0]
		release := keepReleasedEntries(t, s)
		defer release()
		require.Equal(t, []int64{old}, ids(claim(t, s, pid, t0, 1).Jobs))
		m := enqueue(t, s, t0, call("co/m"))[0]

		caller := open()
		var res []engine.Enqueued
		var wait func() error
		rh, recH := testdb.Record(s)
		recH.Before = func(stmt string) {
			if wait != nil || !strings.Contains(stmt, "SET state = 'running'") {
				return
			}
			wait = testdb.CallWhileHeld(t, s, caller, func(tx engine.Tx) (err error) {
				res, err = caller.Enqueue(ctx, tx, engine.At(t0), []engine.NewJob{call("co/a"), call("co/m")})
				return err
			})
		}
		require.Equal(t, []int64{m}, ids(claim(t, rh, pid, t0, 1).Jobs))
		require.NotNil(t, wait, "the claim never marked its job running")
		require.NoError(t, wait(), "the caller's transaction never gets a deadlock back")
		require.Equal(t, 1, testdb.Count(recH.Take(), "SET state = 'running'"), "the claim ran once: no deadlock failed it")
		require.Len(t, res, 2)
		for i, r := range res {
			require.False(t, r.Joined, "call %d joined a job no longer pending", i)
			require.Equal(t, engine.StateReady, state(t, s, r.ID).State)
		}
	})
}

// keepReleasedEntries keeps InnoDB from purging the index entries that
// rows changed from now on leave, until the returned func runs: a
// transaction at REPEATABLE READ holds a snapshot from before them. On
// other databases it does nothing.
func keepReleasedEntries(t *testing.T, s *engine.Store) func() {
	t.Helper()
	if s.Dialect().Name() != "mysql" {
		return func() {}
	}
	ctx := context.Background()
	tx, err := s.DB().Begin(ctx)
	require.NoError(t, err)
	for _, q := range []string{
		// On this session only: the snapshot's transaction replaces tx's.
		"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
		"START TRANSACTION WITH CONSISTENT SNAPSHOT",
	} {
		_, err := tx.Exec(ctx, q)
		require.NoError(t, err)
	}
	return func() {
		_, err := tx.Exec(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
	}
}
