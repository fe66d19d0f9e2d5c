package jobs

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/store"
)

type benchArgs struct{ N int }

func (benchArgs) Kind() string { return "bench" }

// BenchmarkExecute measures a worker's hot path for one claimed job, from
// the claim's row to the result on its way to the database: decode the
// args, run the handler (a no-op) under its timeout and panic recovery,
// and decide the outcome. "plain" is a worker with no middleware (the
// integration off), the others add one pass-through middleware, or read
// the run's logger.
func BenchmarkExecute(b *testing.B) {
	dir := b.TempDir()
	s, err := store.Open(context.Background(), "sqlite:"+filepath.Join(dir, "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		name string
		mw   []Middleware
		log  bool
	}{
		{name: "plain"},
		{name: "middleware", mw: []Middleware{func(ctx context.Context, _ JobInfo, next func(context.Context) error) error { return next(ctx) }}},
		{name: "logger", log: true},
	} {
		b.Run(c.name, func(b *testing.B) {
			reg := NewRegistry()
			if err := Register(reg, func(ctx context.Context, j *Job[benchArgs]) error {
				if c.log {
					Logger(ctx).Debug("run", "n", j.Args.N)
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			w, err := NewWorker(s, reg, WorkerConfig{Logger: quiet, Middleware: c.mw})
			if err != nil {
				b.Fatal(err)
			}
			j := &engine.Job{ID: 1, Kind: "bench", Queue: "default", Args: []byte(`{"N":1}`), Attempt: 1, MaxAttempts: 25, Calls: 1}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				// As start does: the run's state lives in the running job.
				rj := &runningJob{job: j, run: runState{base: w.log, job: j}}
				benchSink = rj
				if r := w.execute(ctx, j, &rj.run); !r.complete {
					b.Fatal("not completed")
				}
			}
		})
	}
}

// benchSink makes the running job escape, as start's does.
var benchSink *runningJob
