package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// guarantees.md, "Time": heartbeats "are all written and compared on the
// database's clock ..., so a host whose clock is off can neither clear a
// budget early, forgive its debt, promote a job early, nor presume a live
// process dead." TestAHostAheadOfTheDatabaseDecidesOnTheDatabasesClock
// checks the first three, and that a heartbeat is stamped on the
// database's clock; this one has a reaper on a host that runs ahead. A
// reaper whose host reads ten minutes past the
// database's now leaves a process that heartbeated a minute ago, and its
// running job, alone; once the database's own clock passes DeadAfter, it
// reaps.
func TestAReaperWhoseHostRunsAheadPresumesNoLiveProcessDead(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		dbNow := t0
		s := testdb.WithDatabaseClock(base, func() time.Time { return dbNow })
		db := engine.DatabaseTime(func() time.Time { return dbNow })
		ahead := engine.DatabaseTime(func() time.Time { return dbNow.Add(10 * time.Minute) })
		const deadAfter = 5 * time.Minute

		pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", PID: 1, Queues: "default"}, db)
		require.NoError(t, err)
		id := enqueue(t, s, t0, job("k", "default", 0))[0]
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 1, Clock: db})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1)

		dbNow = at(4 * time.Minute)
		ok, err := s.Heartbeat(ctx, pid, db)
		require.NoError(t, err)
		require.True(t, ok)
		dbNow = at(5 * time.Minute) // the host reads 15 minutes: 11 past the heartbeat
		n, err := s.ReapDeadProcesses(ctx, ahead, deadAfter)
		require.NoError(t, err)
		require.Zero(t, n, "a heartbeat one minute old on the database's clock is live, whatever the host reads")
		require.Equal(t, engine.StateRunning, state(t, s, id).State)

		dbNow = at(9*time.Minute + time.Second) // 5 m 1 s after the heartbeat
		n, err = s.ReapDeadProcesses(ctx, ahead, deadAfter)
		require.NoError(t, err)
		require.Equal(t, 1, n, "past DeadAfter on the database's clock the process is presumed dead")
		require.Equal(t, engine.StateReady, state(t, s, id).State)
	})
}
