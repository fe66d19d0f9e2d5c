package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type snapSerial struct{ N int }

func (snapSerial) Kind() string { return "snap_serial" }

// docs/observability.md: an explanation's facts are one snapshot of the
// database. Between explain's read of a blocked job and its read of the
// job's semaphore, an operator (another process) cancels the job holding
// the key's one slot, which hands the slot to the job explained, and
// overrides the kind's rate limit: the explanation is all from before
// (blocked behind the holder, under the declared limit), never "blocked
// … held by job(s) [itself]; this job holds one".
func TestExplainSaysWhatOneSnapshotHolds(t *testing.T) {
	eachPool(t, func(t *testing.T, h, other *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[snapSerial]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[snapSerial]{To: 1, Key: "one"}),
			jobs.RateLimit(ratelimit.Limit[snapSerial]{To: 10, Per: time.Second, Key: "global"})))
		holder := h.enqueue(snapSerial{N: 1})
		mine := h.enqueue(snapSerial{N: 2})
		j := h.job(mine)
		require.Equal(t, engine.StateBlocked, j.State)
		require.Len(t, j.RateKeys, 1)

		d, ok := h.store.Dialect().(engine.DashboardDialect)
		require.True(t, ok)
		semaphoreRead, _ := d.GetSemaphore(j.ConcKey)
		rs, rec := testdb.Record(h.store)
		armed := true
		var cancelErr, overrideErr error
		rec.Before = func(q string) {
			if !armed || q != semaphoreRead {
				return
			}
			armed = false // the job, its budget and the overrides are read; its semaphore is next
			_, cancelErr = other.store.CancelJobs(ctx, engine.At(t0), []int64{holder}, "")
			overrideErr = other.store.SetOverride(ctx, engine.Override{Target: j.RateKeys[0].Key, To: 1, Per: time.Minute}, t0)
		}
		e, err := jobs.Explain(ctx, testdb.Public(rs), h.reg, mine, t0)
		require.NoError(t, err)
		require.False(t, armed, "explain read the semaphore")
		require.NoError(t, cancelErr)
		require.NoError(t, overrideErr)
		require.True(t, h.job(mine).HoldsSlot, "the cancel handed the slot on")

		lines := strings.Join(e.Lines(), "\n")
		require.Equal(t, jobs.ReasonBlocked, e.Reason, lines)
		require.Equal(t, engine.StateBlocked, e.State, lines)
		require.Equal(t, &jobs.ConcurrencyExplanation{Key: j.ConcKey, To: 1, Held: 1, Holders: []int64{holder}}, e.Concurrency, lines)
		require.Contains(t, lines, fmt.Sprintf("1 of 1 slot(s) held by job(s) [%d]", holder))
		require.NotContains(t, lines, "this job holds one")
		require.Len(t, e.Limits, 1, lines)
		require.Equal(t, 10, e.Limits[0].To, "the limit as declared before the override: %s", lines)
		require.Empty(t, e.Limits[0].Override, lines)
	})
}
