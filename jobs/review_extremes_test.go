package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/jobs"
)

// Review of extreme values: findings, each a failing test on main.

// rxNode and rxThread are args with a recursive shape (a thread of replies, a parsed
// expression): encoding/json encodes any depth, but decodes at most
// 10,000 levels.
type rxNode struct {
	Reply *rxNode `json:",omitempty"`
}

type rxThread struct{ Root *rxNode }

func (rxThread) Kind() string { return "rx_thread" }

// DESIGN.md: "Bad input gets a clear error, at the earliest point"; and
// guarantees.md: "Args reach the handler as they were enqueued". Args
// nested deeper than encoding/json decodes (10,000 levels) are encoded
// and stored without complaint, and then no attempt can decode them: each
// fails with "decode args of rx_thread: invalid character '{' exceeded
// max depth", and the job is retried with backoff until it fails for good,
// a day and more later. The enqueue should refuse them (ErrInvalidArgs,
// naming the depth), or the handler receive them.
func TestReviewArgsTheWorkerCannotDecodeAreRefusedAtEnqueue(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ran := 0
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[rxThread]) error { ran++; return nil }))
		root := &rxNode{}
		n := root
		for range 10_001 {
			n.Reply = &rxNode{}
			n = n.Reply
		}
		res, err := h.client.Enqueue(context.Background(), rxThread{Root: root})
		if err != nil {
			require.ErrorIs(t, err, jobs.ErrInvalidArgs)
			return
		}
		got := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 1, ran, "the handler never got the args it was enqueued with: %+v, last error %q", got, h.job(res.ID).LastError)
	})
}

type rxDay struct{ Day time.Time }

func (rxDay) Kind() string { return "rx_day" }

// rate-limits.md (Keys) promises that equal values give one key ("1 and
// "1"", a whole float and its integer). A time.Time key is turned into its
// String, which carries its location's name and any monotonic reading: the
// args a job's handler receives (decoded from JSON, the zone a fixed
// offset with no name) give another key than the args it was enqueued
// with, and so does the same instant enqueued in UTC. A handler that
// enqueues a follow-up with j.Args (or a process in another zone) lands
// outside the coalesce key — and, keyed the same way, outside the budget or
// the concurrency slot — of the job that holds that very day.
func TestReviewATimeKeyNamesTheInstantNotItsLocation(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		received := make(chan rxDay, 1)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[rxDay]) error { received <- j.Args; return nil },
			jobs.Coalesce(coalesce.Rule[rxDay]{Key: func(a rxDay) any { return a.Day }})))
		paris, err := time.LoadLocation("Europe/Paris")
		require.NoError(t, err)
		day := time.Date(2026, 3, 1, 0, 0, 0, 0, paris)
		ctx := context.Background()

		// The args a handler receives.
		h.enqueue(rxDay{Day: day})
		h.drain(jobs.WorkerConfig{})
		got := <-received
		require.True(t, got.Day.Equal(day))

		first, err := h.client.Enqueue(ctx, rxDay{Day: day})
		require.NoError(t, err)
		again, err := h.client.Enqueue(ctx, got)
		require.NoError(t, err)
		require.True(t, again.Joined, "the args the handler received (%s) make another key than those it was enqueued with (%s)", got.Day, day)
		require.Equal(t, first.ID, again.ID)
		utc, err := h.client.Enqueue(ctx, rxDay{Day: day.UTC()})
		require.NoError(t, err)
		require.True(t, utc.Joined, "the same instant in UTC (%s) makes another key than %s", day.UTC(), day)
	})
}
