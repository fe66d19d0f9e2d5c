package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

type hugePanic struct{ N int }

func (hugePanic) Kind() string { return "huge_panic" }

// guarantees.md: a handler that panics "fails that attempt
// with the panic and its stack", and a kept error is "at most 16 KiB, cut
// on a character boundary …, with each byte that is not valid UTF-8, and
// each NUL, written as \xNN". A panic whose value is 1 MiB of text with
// a NUL, bytes that are not UTF-8 and four-byte characters (a string, an
// error, a value of another type) is recorded on every database as the
// other errors are, and the job retried.
func TestAHugeHostilePanicValueIsKeptAsText(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		head := "bad\x00value\xff\xfe 🔑 "
		huge := head + strings.Repeat("é🔑x", 1<<20/7)
		values := []any{huge, errors.New(huge), struct{ S string }{huge}}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[hugePanic]) error {
			panic(values[j.Args.N])
		}, jobs.MaxAttempts(2)))
		items := make([]jobs.Item, len(values))
		for i := range items {
			items[i] = jobs.Item{Args: hugePanic{N: i}}
		}
		res, err := h.client.EnqueueMany(context.Background(), items)
		require.NoError(t, err)
		out := h.drain(jobs.WorkerConfig{Concurrency: len(values)})
		require.Equal(t, len(values), out.Retried)
		for _, r := range res {
			j := h.job(r.ID)
			require.Equal(t, engine.StateScheduled, j.State)
			require.True(t, utf8.ValidString(j.LastError))
			require.NotContains(t, j.LastError, "\x00")
			require.Contains(t, j.LastError, `bad\x00value\xff\xfe 🔑 `)
			require.True(t, strings.HasSuffix(j.LastError, truncated), "cut and marked")
			require.LessOrEqual(t, len(j.LastError), 16<<10+len(truncated))
			as, err := h.store.Attempts(context.Background(), r.ID)
			require.NoError(t, err)
			require.Len(t, as, 1)
			require.Equal(t, j.LastError, as[0].Error)
		}
	})
}
