// Package recipe runs the rate-limit recipes of the examples on a fake
// clock, so that a program can show in a second what a limit does over
// minutes, and a test can check the recipe's numbers exactly.
package recipe

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/store"

	"github.com/sluicequeue/sluice/jobs"
)

// Start is the fake clock's start.
var Start = time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)

// Log records when each budget admitted a job, on the fake clock.
type Log struct {
	mu    sync.Mutex
	Clock *clock.Fake
	Times map[string][]time.Time
}

// NewLog returns an empty log on a fake clock at Start.
func NewLog() *Log { return &Log{Clock: clock.NewFake(Start), Times: map[string][]time.Time{}} }

// Admit records that a job drawing on budget started now. Handlers call it.
func (l *Log) Admit(budget string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Times[budget] = append(l.Times[budget], l.Clock.Now())
}

// All returns every admission, in time order.
func (l *Log) All() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Time
	for _, ts := range l.Times {
		out = append(out, ts...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// Simulate enqueues items at Start and works them for d of fake time: every
// step (a dispatcher poll) it promotes due jobs and claims and runs all
// that their limits admit.
func Simulate(ctx context.Context, s *store.Store, reg *jobs.Registry, l *Log, items []jobs.Item, step, d time.Duration) error {
	c := jobs.NewClient(s, reg, jobs.ClientConfig{Clock: l.Clock})
	if _, err := c.EnqueueMany(ctx, items); err != nil {
		return err
	}
	w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{Clock: l.Clock, Concurrency: 100,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	for end := l.Clock.Now().Add(d); !l.Clock.Now().After(end); l.Clock.Advance(step) {
		if _, err := w.Drain(ctx); err != nil {
			return err
		}
	}
	return nil
}

// PerWindow counts times in consecutive windows of per from Start.
func PerWindow(times []time.Time, per time.Duration, windows int) []int {
	out := make([]int, windows)
	for _, t := range times {
		if i := int(t.Sub(Start) / per); i >= 0 && i < windows {
			out[i]++
		}
	}
	return out
}

// TempStore opens a migrated SQLite store in a temporary directory, for
// the example programs; close removes it.
func TempStore(ctx context.Context) (s *store.Store, closeFn func(), err error) {
	dir, err := os.MkdirTemp("", "sluice-example-")
	if err != nil {
		return nil, nil, err
	}
	s, err = store.Open(ctx, "sqlite:"+filepath.Join(dir, "example.db"))
	if err == nil {
		_, err = s.MigrateUp(ctx, 0)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("example database: %w", err)
	}
	return s, func() { _ = s.Close(); _ = os.RemoveAll(dir) }, nil
}

// Timeline works the queues on the fake clock for d, one step at a time:
// each step it calls arrive (to enqueue what arrives then), lets the
// dispatcher tick and works every job that is ready, then advances the
// clock by step.
func Timeline(ctx context.Context, s *store.Store, reg *jobs.Registry, l *Log, step, d time.Duration, arrive func(c *jobs.Client, now time.Time) error) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := jobs.NewClient(s, reg, jobs.ClientConfig{Clock: l.Clock})
	w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{Clock: l.Clock, Concurrency: 100, Logger: quiet})
	if err != nil {
		return err
	}
	disp, err := dispatcher.New(s, dispatcher.Config{Clock: l.Clock, Logger: quiet})
	if err != nil {
		return err
	}
	for end := l.Clock.Now().Add(d); l.Clock.Now().Before(end); l.Clock.Advance(step) {
		if err := arrive(c, l.Clock.Now()); err != nil {
			return err
		}
		if _, err := disp.Tick(ctx); err != nil {
			return err
		}
		if _, err := w.Drain(ctx); err != nil {
			return err
		}
	}
	return nil
}
