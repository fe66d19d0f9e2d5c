package jobs_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

type r7input struct{ S string }

func (r7input) Kind() string { return "r7input" }

type r7nulKind struct{}

func (r7nulKind) Kind() string { return "bad\x00kind" }

// Bad names get a clear error at the earliest point, naming what is
// wrong, and nothing is written: a 1 KiB queue name (at the option, and at
// NewWorker), a NUL in a kind's name (at registration), a NUL or a
// non-UTF-8 byte in a queue name.
func TestBadNamesAreRefusedAtTheEarliestPoint(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[r7input](h.reg))
		long := strings.Repeat("q", 1024)
		_, err := h.client.Enqueue(context.Background(), r7input{}, jobs.Queue(long))
		require.ErrorContains(t, err, "1024 bytes")
		_, err = h.client.Enqueue(context.Background(), r7input{}, jobs.Queue("a\x00b"))
		require.ErrorContains(t, err, "Queue")
		_, err = h.client.Enqueue(context.Background(), r7input{}, jobs.Queue("a\xffb"))
		require.ErrorContains(t, err, "UTF-8")
		_, err = jobs.NewWorker(testdb.Public(h.store), h.reg, jobs.WorkerConfig{Queues: []string{long}})
		require.ErrorContains(t, err, "1024 bytes")
		err = jobs.Declare[r7nulKind](jobs.NewRegistry())
		require.Error(t, err)
		require.Contains(t, err.Error(), "kind")
		require.Zero(t, countAllJobs(t, h.store))
	})
}

// "A value may hold any valid UTF-8, NUL included" (CheckMetadataEntry),
// and args "reach the handler as they were enqueued": a NUL and a 16 KiB
// string in args and metadata arrive unchanged on every database, and a
// RunAt before 1970 runs the job now ("A time that is not after now …
// runs the job now").
func TestNULsAndLongValuesArriveUnchanged(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var gotArgs []string
		var gotMD []map[string]string
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[r7input]) error {
			mu.Lock()
			defer mu.Unlock()
			gotArgs = append(gotArgs, j.Args.S)
			gotMD = append(gotMD, j.Metadata)
			return nil
		}))
		s := "a\x00b" + strings.Repeat("é", 8<<10)
		md := map[string]string{"nul": "x\x00y", "long": strings.Repeat("z", 4<<10)}
		id := h.enqueue(r7input{S: s}, jobs.WithMetadata(md), jobs.RunAt(time.Date(1901, 1, 1, 0, 0, 0, 0, time.UTC)))
		require.Equal(t, engine.StateReady, h.job(id).State)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, []string{s}, gotArgs)
		require.Equal(t, []map[string]string{md}, gotMD)
	})
}
