package jobs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// A deploy moves kind email from queue mail to queue outbox and its
// workers now claim outbox only: the jobs the previous version enqueued
// into mail (ready, scheduled, and one already done) wait there for good.
// Check warns of them (W011), and stops once a worker claims mail again
// or the queue holds nothing waiting; a queue a registered kind goes to
// is W007's, not W011's.
func TestCheckWarnsOfJobsLeftInAQueueNoOneClaims(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[email]) error { return nil }, jobs.Queue("mail")))
		h.enqueue(email{To: "a"})
		h.enqueue(email{To: "b"}, jobs.RunAt(t0.Add(time.Hour)))
		done := h.enqueue(email{To: "c"})
		_, err := h.store.CancelJobs(ctx, engine.At(t0), []int64{done}, "")
		require.NoError(t, err)

		moved := jobs.NewRegistry()
		require.NoError(t, jobs.Register(moved, func(context.Context, *jobs.Job[email]) error { return nil }, jobs.Queue("outbox")))
		_, err = h.store.RegisterProcess(ctx, engine.Process{Kind: "worker", Queues: "outbox"}, engine.DatabaseTime(time.Now))
		require.NoError(t, err)

		stranded := func(reg *jobs.Registry) []string {
			t.Helper()
			findings, err := jobs.Check(ctx, reg, testdb.Public(h.store))
			require.NoError(t, err)
			var got []string
			for _, f := range findings {
				if f.Code == jobs.CodeStrandedJobs {
					got = append(got, f.String())
				}
			}
			return got
		}
		got := stranded(moved)
		require.Len(t, got, 1, "%q", got)
		require.True(t, strings.HasPrefix(got[0], "W011 warning: queue mail holds 2 job(s) waiting to run, but no live worker claims it"), got[0])
		require.Contains(t, got[0], "worker --queues mail")
		require.Empty(t, stranded(h.reg), "the old registry's kind goes to mail: W007 speaks of it")

		_, err = h.store.RegisterProcess(ctx, engine.Process{Kind: "worker", Queues: "outbox,mail"}, engine.DatabaseTime(time.Now))
		require.NoError(t, err)
		require.Empty(t, stranded(moved), "a live worker claims mail")
	})
}
