package engine_test

// What a retried operator's action keeps of its failed attempts: nothing
// (DESIGN.md invariant 6, "A transaction that is retried starts from
// fresh inputs; nothing it computed in a failed attempt survives into the
// next").

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// readInt64 reads one integer.
func readInt64(t *testing.T, s *engine.Store, q string) int64 {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), q)
	require.NoError(t, err)
	defer rows.Close()
	require.True(t, rows.Next(), "no row for %s", q)
	var n int64
	require.NoError(t, rows.Scan(&n))
	return n
}

// argsHold reports whether one of a statement's arguments is, or holds,
// the string mark.
func argsHold(args []any, mark string) bool {
	for _, a := range args {
		switch v := a.(type) {
		case string:
			if strings.Contains(v, mark) {
				return true
			}
		case []string:
			for _, s := range v {
				if strings.Contains(s, mark) {
					return true
				}
			}
		}
	}
	return false
}

// failFirstWithArg makes the first statement whose arguments hold mark
// fail with a deadlock (testdb.Fault), once.
func failFirstWithArg(f *testdb.Faults, mark string) *bool {
	fired := new(bool)
	f.Observe = func(q string, args []any) {
		// Observe runs with the Faults' lock held, just before FailOnce
		// is checked: setting it here fails this very statement.
		if !*fired && q != "" && argsHold(args, mark) {
			*fired = true
			f.FailOnce = q
		}
	}
	return fired
}

// guarantees.md / fairness.md: "A fair job that was never claimed gives
// back its key's charge" — a job that was claimed keeps it. CancelJobs
// noted the fair jobs it found unclaimed in a map that outlived the
// attempt: when the cancel's first attempt deadlocked after it read a
// fair job as never claimed, and a worker claimed that job and its run
// failed (a retry, scheduled) before the second attempt, the second
// attempt cancelled a job that ran — and the refund of the first
// attempt's stale view gave its key the charge of a run it had. Now only
// the attempt that commits says which jobs were never claimed.
func TestARetriedCancelRefundsNoFairChargeOfAJobClaimedMeanwhile(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		s, faults := testdb.WithFaults(base)
		pid := register(t, s, t0)
		id := enqueue(t, s, t0, fairJob("tenant", 1))[0]
		finish := func() int64 {
			return readInt64(t, s, "SELECT finish FROM sluice_fair_keys WHERE fair_key = 'tenant'")
		}
		charged := finish()

		const reason = "cancel raced by a claim"
		fired := failFirstWithArg(faults, reason)
		faults.BeforeRetry = func() {
			// Another worker claims the job, and its run fails: it waits
			// for its retry, scheduled, claimed once.
			res, err := base.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 1,
				Clock: engine.At(t0), Fair: true})
			require.NoError(t, err)
			require.Equal(t, []int64{id}, ids(res.Jobs))
			require.NoError(t, base.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: []engine.Transition{{
				ID: id, State: engine.StateScheduled, RunAt: t0.Add(time.Minute), Error: "boom", Claim: res.Jobs[0].Claims}}}))
		}
		moved, err := s.CancelJobs(ctx, engine.At(t0), []int64{id}, reason)
		require.NoError(t, err)
		require.True(t, *fired, "the cancel's write deadlocked once")
		require.Equal(t, []engine.Moved{{ID: id, State: engine.StateCancelled}}, moved)
		j := state(t, s, id)
		require.EqualValues(t, 1, j.Claims, "the job was claimed before the cancel committed")
		require.Equal(t, charged, finish(), fmt.Sprintf(
			"job %d was claimed and ran before the retried cancel committed, yet the cancel gave its key back the charge of a never-claimed job (finish %d → %d): the first attempt's view of the job survived into the second",
			id, charged, finish()))
	})
}

// The other side of TestARetriedCancelRefundsNoFairChargeOfAJobClaimedMeanwhile:
// a cancel whose first attempt deadlocked, and whose job nobody claimed
// before the retry, still gives the key back its charge, once the retry
// read it never claimed.
func TestARetriedCancelStillRefundsAJobNeverClaimed(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		s, faults := testdb.WithFaults(base)
		id := enqueue(t, s, t0, fairJob("tenant", 1))[0]
		charged := readInt64(t, s, "SELECT finish FROM sluice_fair_keys WHERE fair_key = 'tenant'")

		const reason = "cancel retried"
		fired := failFirstWithArg(faults, reason)
		moved, err := s.CancelJobs(ctx, engine.At(t0), []int64{id}, reason)
		require.NoError(t, err)
		require.True(t, *fired, "the cancel's write deadlocked once")
		require.Equal(t, []engine.Moved{{ID: id, State: engine.StateCancelled}}, moved)
		require.Less(t, readInt64(t, s, "SELECT finish FROM sluice_fair_keys WHERE fair_key = 'tenant'"), charged,
			"the job was never claimed: its key gets its charge back")
	})
}
