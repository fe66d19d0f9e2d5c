package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

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
