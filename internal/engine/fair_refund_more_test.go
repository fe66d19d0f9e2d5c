package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// fairFinish reads a key's finish at the default queue's priority 0.
func fairFinish(t *testing.T, s *engine.Store, key string) int64 {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), "SELECT finish FROM sluice_fair_keys WHERE queue = 'default' AND priority = 0 AND fair_key = '"+key+"'")
	require.NoError(t, err)
	defer rows.Close()
	var f int64
	require.True(t, rows.Next())
	require.NoError(t, rows.Scan(&f))
	return f
}

// someSessionWaitsOnALock returns once some session waits on a row lock (or
// fails after 20 s): on MySQL, once the refund's statement on the key is
// under way, as it cannot end before the enqueue's transaction does.
// SQLite has no such wait: a writer waits for the other's whole
// transaction.
func someSessionWaitsOnALock(t *testing.T, s *engine.Store) bool {
	t.Helper()
	var q string
	switch s.Dialect().Name() {
	case "postgres":
		q = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%sluice_fair_keys%'"
	case "mysql":
		q = "SELECT count(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND info LIKE '%sluice_fair_keys%' AND state <> ''"
	default:
		return false
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		rows, err := s.DB().Query(context.Background(), q)
		require.NoError(t, err)
		var n int
		require.True(t, rows.Next())
		require.NoError(t, rows.Scan(&n))
		rows.Close()
		if n > 0 {
			return true
		}
	}
	t.Fatal("the refund never waited on the key's row")
	return false
}

// refundFair's check that no later job of the key is ready
// (RefundFairKeys) must see a job an enqueue adds while the refund waits
// for that key's row. An enqueue holds the key's row, having charged it
// for a new ready job D (start F, the key's finish); the operator's cancel
// of the key's older unclaimed job A (start C < F) waits on that row in
// its refund transaction. When the enqueue commits, the key has a ready
// job at or after C: its finish must stay past D's start. On PostgreSQL
// the single-key UPDATE re-checks the row it waited for but reads the
// jobs as of its own start, so it does not see D and sets the finish back
// to C: the key's next job starts before D, one step not charged.
func TestARefundDoesNotMissAJobEnqueuedWhileItWaitsForTheKey(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		r := newFairRig(t, s)
		a := r.add("k", 1, 1, nil)
		before := fairFinish(t, s, "k")

		tx, err := s.DB().Begin(ctx)
		require.NoError(t, err)
		d, err := s.Enqueue(ctx, tx, engine.At(r.now), []engine.NewJob{fairJob("k", 1)})
		require.NoError(t, err)

		done := make(chan error, 1)
		go func() {
			_, err := s.CancelJobs(ctx, engine.At(r.now), a, "")
			done <- err
		}()
		someSessionWaitsOnALock(t, s)
		require.NoError(t, tx.Commit(ctx))
		require.NoError(t, <-done)

		dj := state(t, s, d[0].ID)
		require.Equal(t, engine.StateReady, dj.State)
		require.Equal(t, before, dj.FairStart, "D starts at the key's finish after A")
		require.Greater(t, fairFinish(t, s, "k"), dj.FairStart,
			"the key's finish went back behind its ready job D's start: the refund did not see D")
	})
}

// a plain enqueue, and an operator's cancel of jobs that are
// not fair (or fair and claimed), run no statement on the fairness keys.
func TestAPlainCancelRunsNoFairStatement(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		rs, rec := testdb.Record(s)
		plain := enqueue(t, rs, t0, job("k", "default", 0), job("k", "default", 0))
		_, err := rs.CancelJobs(ctx, engine.At(t0), plain, "")
		require.NoError(t, err)
		for _, q := range rec.Take() {
			require.NotContains(t, q, "sluice_fair_keys")
		}
	})
}

// the refund runs in a transaction of its own after the
// cancels committed (refundFair). When it fails (a crash between the two,
// the operator's Ctrl-C, a lost connection: here the database refuses the
// refund's statement), the jobs stay cancelled and the key keeps the
// charge of the whole flood; cancelling the jobs again refuses each (they
// are cancelled) and gives nothing back, and nothing else ever does (the
// key's finish is ahead of the level's virtual time, so PruneFairKeys
// keeps it). The key's next job waits behind the flood that never ran,
// the starvation the refund was meant to end, with no way for the
// operator to undo it.
func TestAFailedRefundCanBeDoneAgain(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		fs, f := testdb.WithFaults(s)
		r := newFairRig(t, fs)
		flood := r.add("runaway", 1, 80, nil)
		r.add("steady", 1, 30, nil)
		f.Poison = "runaway" // only the refund's statement binds the key
		moved, err := fs.CancelJobs(ctx, engine.At(r.now), flood, "bad tenant")
		require.Error(t, err, "the refund failed")
		require.Len(t, moved, len(flood), "the jobs were cancelled all the same")
		f.Poison = ""
		// The operator runs the cancel again.
		_, err = fs.CancelJobs(ctx, engine.At(r.now), flood, "bad tenant")
		require.ErrorIs(t, err, engine.ErrNotAllowed)
		next := r.add("runaway", 1, 1, nil)[0]
		round := r.roundOf("runaway", 40)
		require.LessOrEqual(t, round, 2, "the key's next job %d was claimed in round %d: the failed refund left the key charged for 80 cancelled jobs, and nothing gives it back", next, round)
	})
}
