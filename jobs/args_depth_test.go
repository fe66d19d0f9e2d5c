package jobs_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
)

// adNode and adThread are args with a recursive shape (a thread of
// replies, a parsed expression): encoding/json encodes any depth, but
// decodes at most 10,000 levels.
type adNode struct {
	Reply *adNode `json:",omitempty"`
}

type adThread struct{ Root *adNode }

func (adThread) Kind() string { return "ad_thread" }

// adDeep holds a value nested as deep as a test makes it, and a string
// that holds brackets.
type adDeep struct {
	Deep any
	Text string `json:",omitempty"`
}

func (adDeep) Kind() string { return "ad_deep" }

// nested returns n arrays, each inside the one before: [[…]].
func nested(n int) any {
	var v any = []any{}
	for range n - 1 {
		v = []any{v}
	}
	return v
}

// depthOf counts how deeply v nests arrays, as decoded.
func depthOf(v any) int {
	n := 0
	for {
		a, ok := v.([]any)
		if !ok {
			return n
		}
		n++
		if len(a) == 0 {
			return n
		}
		v = a[0]
	}
}

// DESIGN.md: "Bad input gets a clear error, at the earliest point"; and
// guarantees.md: "Args reach the handler as they were enqueued". Args
// nested deeper than encoding/json decodes (10,000 levels) used to be
// stored without complaint, and then every attempt failed ("exceeded max
// depth") until the job failed for good, a day and more later. The
// enqueue refuses them, naming the depth, on every path that encodes
// args.
func TestArgsTheWorkerCannotDecodeAreRefusedAtEnqueue(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ran := 0
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[adThread]) error { ran++; return nil }))
		root := &adNode{}
		n := root
		for range 10_001 {
			n.Reply = &adNode{}
			n = n.Reply
		}
		ctx := context.Background()
		_, err := h.client.Enqueue(ctx, adThread{Root: root})
		require.ErrorIs(t, err, jobs.ErrInvalidArgs)
		// The args object, Root and 10,001 replies.
		require.ErrorContains(t, err, "10003 levels deep; a worker decodes at most 10000")

		_, err = h.client.EnqueueMany(ctx, []jobs.Item{{Args: adThread{}}, {Args: adThread{Root: root}}})
		require.ErrorIs(t, err, jobs.ErrInvalidArgs)
		tx, _, rollback := callerTx(t, h.store)
		_, err = h.client.EnqueueTx(ctx, tx, adThread{Root: root})
		rollback()
		require.ErrorIs(t, err, jobs.ErrInvalidArgs)
		require.ErrorIs(t, jobs.Perform(ctx, h.reg, adThread{Root: root}), jobs.ErrInvalidArgs)
		require.Zero(t, ran)
		require.Zero(t, h.drain(jobs.WorkerConfig{}).Ran(), "nothing was stored")
	})
}

// The deepest args a worker decodes are accepted and reach the handler;
// one level more is refused. Brackets inside strings are text, not
// nesting.
func TestArgsAsDeepAsTheWorkerDecodesReachTheHandler(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		got := make(chan adDeep, 2)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[adDeep]) error { got <- j.Args; return nil }))
		ctx := context.Background()

		// The args object is one level, Deep the rest.
		_, err := h.client.Enqueue(ctx, adDeep{Deep: nested(10_000)})
		require.ErrorIs(t, err, jobs.ErrInvalidArgs)
		require.ErrorContains(t, err, "10001 levels deep")

		h.enqueue(adDeep{Deep: nested(9_999)})
		brackets := strings.Repeat(`{["\`, 5_000) + `"]}`
		h.enqueue(adDeep{Deep: nested(3), Text: brackets})
		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 2, res.Completed, "%+v", res)
		first, second := <-got, <-got
		if first.Text != "" {
			first, second = second, first
		}
		require.Equal(t, 9_999, depthOf(first.Deep))
		require.Equal(t, brackets, second.Text)
		require.Equal(t, 3, depthOf(second.Deep))
	})
}
