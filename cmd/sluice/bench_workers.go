package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

// settle is how long registered workers get to start listening (LISTEN on
// PostgreSQL) before a gated start releases the queue.
const settle = 300 * time.Millisecond

// stallAfter ends a run in which no job finished for this long.
const stallAfter = time.Minute

// startWorkers starts the run's workers — in this process on s, or as
// --procs child processes on pools of their own — and, when the run needs
// one, a dispatcher with default settings (in this process).
//
// A gated start pauses the bench queue, starts the workers, waits until
// every one has registered in sluice_processes, and resumes the queue:
// no job is touched before the time it returns. Runs with --procs are
// always gated. Otherwise the workers start at once and the time returned
// is the moment before (how in-process runs have always been timed).
func (b *bench) startWorkers(ctx context.Context, s *store.Store, gated bool) (began time.Time, stop func(), err error) {
	gated = gated || b.f.procs > 0
	if gated {
		if err := b.store.PauseQueue(ctx, benchQueue, time.Now()); err != nil {
			return time.Time{}, nil, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var failMu sync.Mutex
	var failed error
	fail := func(what string, err error) {
		if err != nil && ctx.Err() == nil {
			failMu.Lock()
			failed = errors.Join(failed, fmt.Errorf("%s: %w", what, err))
			failMu.Unlock()
		}
	}
	var kids *procs
	var names []string
	began = time.Now()
	if b.f.procs > 0 {
		if kids, err = b.startProcs(); err != nil {
			cancel()
			return time.Time{}, nil, err
		}
		names = kids.names()
	} else {
		for i := 0; i < b.f.workers; i++ {
			name := b.workerName()
			w, err := jobs.NewWorker(s, b.reg, b.workerConfig(jobs.WorkerConfig{
				Queues: []string{benchQueue}, Concurrency: b.f.concurrency, Logger: b.quiet, Name: name, Hooks: b.t.hooks(),
			}))
			must(err)
			names = append(names, name)
			wg.Add(1)
			go func() { defer wg.Done(); fail(name, w.Run(ctx)) }()
		}
	}
	if b.dispatch {
		ds := s
		if kids != nil {
			ds = b.pub
		}
		d, err := dispatcher.New(ds, dispatcher.Config{Interval: b.f.dispInterval, Logger: b.quiet})
		must(err)
		wg.Add(1)
		go func() { defer wg.Done(); fail("dispatcher", d.Run(ctx)) }()
	}
	stop = func() {
		if kids != nil {
			kids.stop()
		}
		cancel()
		wg.Wait()
		if failed != nil {
			b.say("bench: %v", failed)
		}
	}
	if !gated {
		return began, stop, nil
	}
	alive := func() error {
		failMu.Lock()
		defer failMu.Unlock()
		if failed != nil {
			return failed
		}
		if kids != nil {
			return kids.alive()
		}
		return nil
	}
	if err := b.waitRegistered(ctx, names, alive); err != nil {
		stop()
		return time.Time{}, nil, err
	}
	time.Sleep(settle)
	if err := b.store.ResumeQueue(ctx, benchQueue, time.Now()); err != nil {
		stop()
		return time.Time{}, nil, err
	}
	began = time.Now()
	// Resuming a queue wakes no one: where the database can, wake the
	// workers as an enqueue would (elsewhere they find the jobs at their
	// next poll, within 100ms).
	if q, args := b.store.SQL().Notify([]string{benchQueue}); q != "" {
		if _, err := b.store.DB().Exec(ctx, q, args...); err != nil {
			stop()
			return time.Time{}, nil, fmt.Errorf("wake the workers: %w", err)
		}
	}
	return began, stop, nil
}

// workerName names a worker uniquely, so that its process row is known.
func (b *bench) workerName() string {
	b.seq++
	return fmt.Sprintf("bench-%d-%d", os.Getpid(), b.seq)
}

// waitRegistered waits until every named worker has a process row.
func (b *bench) waitRegistered(ctx context.Context, names []string, alive func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		rows, err := b.store.ListProcesses(ctx)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, r := range rows {
			seen[r.Name] = true
		}
		var missing []string
		for _, n := range names {
			if !seen[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if err := alive(); err != nil {
			return fmt.Errorf("a worker stopped before it registered: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("workers %s did not register within a minute", strings.Join(missing, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitFor waits until count reaches n. It returns false when the deadline
// (if not zero) passes first, and an error when ctx ends or no job finished
// for stallAfter.
func waitFor(ctx context.Context, count func() int64, n int64, deadline time.Time) (bool, error) {
	last, lastAt := count(), time.Now()
	for {
		c := count()
		if c >= n {
			return true, nil
		}
		now := time.Now()
		if c != last {
			last, lastAt = c, now
		} else if now.Sub(lastAt) > stallAfter {
			return false, fmt.Errorf("stalled: %d of %d done, none for %s", c, n, stallAfter)
		}
		if !deadline.IsZero() && now.After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// progress prints count every 2 seconds until stop is closed; with --procs
// it adds the bench queue's jobs per state, as the database has them.
func (b *bench) progress(ctx context.Context, began time.Time, count func() int64, stop <-chan struct{}) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	last, lastAt := int64(0), began
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			n := count()
			states := ""
			if b.f.procs > 0 {
				states = "  " + b.depth(ctx)
			}
			b.say("%6.1fs  done %8d  (%.0f jobs/s now)%s", now.Sub(began).Seconds(), n, float64(n-last)/now.Sub(lastAt).Seconds(), states)
			last, lastAt = n, now
		}
	}
}

// depth describes the bench queue's unfinished jobs per state.
func (b *bench) depth(ctx context.Context) string {
	qs, err := b.store.Depth(ctx)
	if err != nil {
		return "depth: " + err.Error()
	}
	var parts []string
	for _, q := range qs {
		if q.Queue != benchQueue {
			continue
		}
		for _, st := range engine.States {
			if n := q.Counts[st]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", st, n))
			}
		}
	}
	if len(parts) == 0 {
		return "db: none unfinished"
	}
	return "db: " + strings.Join(parts, ", ")
}
