// Package jobstest helps users test code that enqueues and works sluice
// jobs: assert what was enqueued (also inside a transaction that has not
// committed), and drain queues inline on a fake clock. To run one handler
// directly with typed args, use jobs.Perform.
package jobstest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"strings"
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
	s, ex, err := via(c, tx)
	if err != nil {
		return nil, err
	}
	return enqueuedBelow[T](ctx, ex, s, 0, 1000)
}

// via is the store of c and what to read it through: tx when it is not
// nil, else the client's pool.
func via(c *jobs.Client, tx any) (*engine.Store, engine.Executor, error) {
	s := engine.From(c.Store())
	var ex engine.Executor = s.DB()
	if tx != nil {
		var err error
		if ex, err = s.DB().WrapTx(tx); err != nil {
			return nil, nil, err
		}
	}
	return s, ex, nil
}

// enqueuedBelow returns up to limit jobs of T's kind with ids below
// before (0: any), newest first.
func enqueuedBelow[T jobs.Args](ctx context.Context, ex engine.Executor, s *engine.Store, before int64, limit int) ([]Job[T], error) {
	var zero T
	infos, err := s.ListJobsVia(ctx, ex, engine.JobFilter{Kind: zero.Kind(), Before: before, Limit: limit})
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
// whose args equal args (compared as JSON, numbers by their exact value)
// and that matches want, and returns the newest such job. It searches
// every job of the kind, however many; tx is as for Enqueued.
func RequireEnqueued[T jobs.Args](t testing.TB, c *jobs.Client, tx any, args T, want ...Want) Job[T] {
	t.Helper()
	ctx := context.Background()
	s, ex, err := via(c, tx)
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
	var newest []Job[T]
	for before := int64(0); ; {
		page, err := enqueuedBelow[T](ctx, ex, s, before, 1000)
		if err != nil {
			t.Fatalf("jobstest: list enqueued %s jobs: %v", args.Kind(), err)
		}
		if newest == nil {
			newest = page
		}
		for _, j := range page {
			if equalJSON(j.JobInfo.Args, wantArgs) && w.matches(j.JobInfo) {
				return j
			}
		}
		if len(page) < 1000 {
			break
		}
		before = page[len(page)-1].ID
	}
	t.Fatalf("jobstest: no %s job enqueued with args %s and %s; enqueued: %s", args.Kind(), wantArgs, w, describe(newest))
	return Job[T]{}
}

// String describes w as a failure message names it: the fields it
// checks.
func (w Want) String() string {
	var parts []string
	if w.Queue != "" {
		parts = append(parts, "queue "+w.Queue)
	}
	if w.Priority != nil {
		parts = append(parts, fmt.Sprintf("priority %d", *w.Priority))
	}
	if w.State != "" {
		parts = append(parts, "state "+string(w.State))
	}
	if w.MaxAttempts != 0 {
		parts = append(parts, fmt.Sprintf("max attempts %d", w.MaxAttempts))
	}
	if len(parts) == 0 {
		return "any queue, priority and state"
	}
	return strings.Join(parts, ", ")
}

func (w Want) matches(j *engine.JobInfo) bool {
	return (w.Queue == "" || w.Queue == j.Queue) &&
		(w.Priority == nil || *w.Priority == j.Priority) &&
		(w.State == "" || w.State == j.State) &&
		(w.MaxAttempts == 0 || w.MaxAttempts == j.MaxAttempts)
}

// equalJSON reports whether a and b hold the same JSON value: objects
// whatever their keys' order, numbers by their exact value (an int64 past
// 2^53 is not rounded to a float64, and 1.0 equals 1).
func equalJSON(a, b []byte) bool {
	x, errX := canonicalJSON(a)
	y, errY := canonicalJSON(b)
	return errX == nil && errY == nil && x == y
}

// canonicalJSON renders b with sorted object keys and each number in one
// spelling of its exact value.
func canonicalJSON(b []byte) (string, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "", err
	}
	out, err := json.Marshal(exactNumbers(v))
	return string(out), err
}

// exactNumbers replaces each json.Number of v by its value's one
// spelling (a big.Float of ample precision, printed in its shortest exact
// form), so that numbers spelled differently compare by value.
func exactNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		f, _, err := big.ParseFloat(v.String(), 10, 1024, big.ToNearestEven)
		if err != nil {
			return v.String()
		}
		return json.Number(f.Text('g', -1))
	case map[string]any:
		for k, e := range v {
			v[k] = exactNumbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = exactNumbers(e)
		}
	}
	return v
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
// no queues it drains those a worker claims by default
// (jobs.WorkerConfig.Queues): every queue reg's kinds go to
// (reg.Queues) and the default queue, so a kind registered with
// jobs.Queue("stripe") is drained without naming its queue.
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
