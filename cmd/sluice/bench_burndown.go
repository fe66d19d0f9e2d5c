package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicequeue/sluice/jobs"
)

func (b *bench) burnDown(ctx context.Context) error {
	b.say("bench: burn-down of %d jobs on %s, %s", b.f.jobs, b.store.Dialect().Name(), b.where())
	k := b.timedKind()
	elapsed, err := b.burn(ctx, b.f.jobs, b.item, k)
	if err != nil {
		return err
	}
	if err := b.rateReport(ctx, elapsed, int64(b.f.jobs)); err != nil {
		return err
	}
	b.say("worked %d jobs in %s", b.f.jobs, elapsed.Round(time.Millisecond))
	if _, err := b.checkOnce(ctx, k); err != nil {
		return err
	}
	b.say("jobs/s: %.0f", float64(b.f.jobs)/elapsed.Seconds())
	return nil
}

// timedKind is the kind the flags' runs enqueue.
func (b *bench) timedKind() kind {
	if b.limit != nil {
		return kLimited
	}
	return kNoop
}

// burn enqueues n jobs, starts the workers and times until n jobs of kind
// k have run and the workers have stopped (so that every completion is
// written). Jobs already in the queue (a flood) stay there, ahead of them.
func (b *bench) burn(ctx context.Context, n int, item func(int) jobs.Item, k kind) (time.Duration, error) {
	began := time.Now()
	if err := b.insert(ctx, n, item); err != nil {
		return 0, err
	}
	inserted := time.Since(began)
	b.say("inserted %d in %s (%.0f jobs/s)", n, inserted.Round(time.Millisecond), float64(n)/inserted.Seconds())
	if err := b.analyze(ctx); err != nil {
		return 0, err
	}
	began, stop, err := b.startWorkers(ctx, b.pub, false)
	if err != nil {
		return 0, err
	}
	stopProgress := make(chan struct{})
	go b.progress(ctx, began, b.t.ran[k].Load, stopProgress)
	_, werr := waitFor(ctx, b.t.ran[k].Load, int64(n), time.Time{})
	stop() // writes the last completions
	close(stopProgress)
	return time.Since(began), werr
}

func (b *bench) continuous(ctx context.Context) error {
	b.say("bench: continuous for %s on %s, %s", b.f.duration, b.store.Dialect().Name(), b.where())
	k := b.timedKind()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var inserted, failed atomic.Int64
	var mu sync.Mutex // b.enqueued
	var wg sync.WaitGroup
	// Two producers keep a backlog of about 20,000 ready jobs.
	for p := 0; p < 2; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pctx.Err() == nil {
				if inserted.Load()-b.t.ran[k].Load() > 20000 {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				items := make([]jobs.Item, 1000)
				for i := range items {
					items[i] = b.item(i)
				}
				if _, err := b.client.EnqueueMany(pctx, items); err == nil {
					inserted.Add(int64(len(items)))
					mu.Lock()
					b.enqueued[kindNames[k]] += len(items)
					mu.Unlock()
				} else if pctx.Err() == nil {
					failed.Add(1)
					b.say("bench: enqueue: %v", err)
				}
			}
		}()
	}
	began, stop, err := b.startWorkers(ctx, b.pub, false)
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	stopProgress := make(chan struct{})
	go b.progress(ctx, began, b.t.ran[k].Load, stopProgress)
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(began.Add(b.f.duration))):
	}
	elapsed := time.Since(began)
	n := b.t.ran[k].Load()
	cancel()
	wg.Wait()
	close(stopProgress)
	if ctx.Err() != nil {
		stop()
		return ctx.Err()
	}
	left := inserted.Load() - b.t.ran[k].Load()
	b.say("finishing the %d jobs left (not timed)…", left)
	_, werr := waitFor(ctx, b.t.ran[k].Load, inserted.Load(), time.Now().Add(2*time.Minute))
	stop()
	if werr != nil {
		b.say("bench: %v", werr)
	}
	if err := b.rateReport(ctx, elapsed, n); err != nil {
		return err
	}
	b.say("inserted %d and worked %d jobs in %s; %d enqueue batches failed", inserted.Load(), n, elapsed.Round(time.Millisecond), failed.Load())
	if _, err := b.checkOnce(ctx, k); err != nil {
		return err
	}
	b.say("jobs/s: %.0f", float64(n)/elapsed.Seconds())
	return nil
}
