// Package jobstest helps users test code that enqueues and works sluice
// jobs: assert what was enqueued (also inside a transaction that has not
// committed), and drain queues inline on a fake clock. To run one handler
// directly with typed args, use jobs.Perform.
package jobstest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

// Job is an enqueued job with its args decoded.
type Job[T jobs.Args] struct {
	// Args are the job's args, decoded.
	Args T
	*store.JobInfo
}

// Enqueued returns the jobs of T's kind that were enqueued, newest first
// (up to 1000), read through tx when it is not nil (a pgx.Tx or *sql.Tx
// that may not have committed) or else through the client's pool.
func Enqueued[T jobs.Args](ctx context.Context, c *jobs.Client, tx any) ([]Job[T], error) {
	var zero T
	s := engine.From(c.Store())
	var ex engine.Executor = s.DB()
	if tx != nil {
		var err error
		if ex, err = s.DB().WrapTx(tx); err != nil {
			return nil, err
		}
	}
	infos, err := s.ListJobsVia(ctx, ex, engine.JobFilter{Kind: zero.Kind(), Limit: 1000})
	if err != nil {
		return nil, err
	}
	out := make([]Job[T], len(infos))
	for i, info := range infos {
		out[i].JobInfo = info
		if err := json.Unmarshal(info.Args, &out[i].Args); err != nil {
			return nil, fmt.Errorf("decode args of job %d: %w", info.ID, err)
		}
	}
	return out, nil
}

// Want narrows RequireEnqueued. Zero fields are not checked.
type Want struct {
	// Queue, when not empty, must match.
	Queue string
	// Priority, when not nil, must match.
	Priority *int
	// State, when not empty, must match.
	State store.State
	// MaxAttempts, when not 0, must match.
	MaxAttempts int
}

// RequireEnqueued fails the test unless a job of T's kind was enqueued
// whose args equal args (compared as JSON) and that matches want, and
// returns it. tx is as for Enqueued.
func RequireEnqueued[T jobs.Args](t testing.TB, c *jobs.Client, tx any, args T, want ...Want) Job[T] {
	t.Helper()
	got, err := Enqueued[T](context.Background(), c, tx)
	if err != nil {
		t.Fatalf("jobstest: list enqueued %s jobs: %v", args.Kind(), err)
	}
	wantArgs, err := json.Marshal(args)
	if err != nil {
		t.Fatalf("jobstest: encode %T: %v", args, err)
	}
	var w Want
	if len(want) > 0 {
		w = want[0]
	}
	for _, j := range got {
		if equalJSON(j.JobInfo.Args, wantArgs) && w.matches(j.JobInfo) {
			return j
		}
	}
	t.Fatalf("jobstest: no %s job enqueued with args %s and %+v; enqueued: %s", args.Kind(), wantArgs, w, describe(got))
	return Job[T]{}
}

func (w Want) matches(j *engine.JobInfo) bool {
	return (w.Queue == "" || w.Queue == j.Queue) &&
		(w.Priority == nil || *w.Priority == j.Priority) &&
		(w.State == "" || w.State == j.State) &&
		(w.MaxAttempts == 0 || w.MaxAttempts == j.MaxAttempts)
}

func equalJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

func describe[T jobs.Args](js []Job[T]) string {
	if len(js) == 0 {
		return "none"
	}
	out := ""
	for i, j := range js {
		if i == 5 {
			return out + fmt.Sprintf(" … and %d more", len(js)-5)
		}
		out += fmt.Sprintf("[id %d queue %s priority %d state %s args %s] ", j.ID, j.Queue, j.Priority, j.State, j.JobInfo.Args)
	}
	return out
}

// Drain works the queues inline until no job is ready, on clk (which it
// never advances), and returns what it did; see jobs.Worker.Drain. With
// no queues it drains "default".
func Drain(ctx context.Context, t testing.TB, s *store.Store, reg *jobs.Registry, clk clock.Clock, queues ...string) jobs.DrainResult {
	t.Helper()
	w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{Queues: queues, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("jobstest: %v", err)
	}
	res, err := w.Drain(ctx)
	if err != nil {
		t.Fatalf("jobstest: drain: %v", err)
	}
	return res
}
