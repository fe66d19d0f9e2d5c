// Package heartbeat is the loop every sluice process (worker or
// dispatcher) runs to stay registered and to recover the jobs of processes
// that died.
package heartbeat

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
)

// Run stamps the process row pid names every interval (timed by c, stamped
// on sc's time), registering again through reregister when another
// process reaped it, and releases the jobs of processes whose heartbeat is
// older than deadAfter. It returns when ctx is done.
func Run(ctx context.Context, s *engine.Store, c clock.Clock, sc engine.Clock, log *slog.Logger, interval, deadAfter time.Duration, pid *atomic.Int64, reregister func(context.Context) error) {
	New(s, c, sc, log, interval, deadAfter, pid, reregister).Run(ctx)
}

// Loop is Run's loop, whose beats may also be asked for between its own
// (BeatIfDue): by a process that does its work inline, as a drain does,
// and so knows when time passed for it — on a fake clock a handler that
// advances it, which the loop's goroutine would see only when the
// scheduler gets to it. Its beats, whoever asks for them, are one at a
// time: a process reaped registers again once.
type Loop struct {
	s          *engine.Store
	c          clock.Clock
	sc         engine.Clock
	log        *slog.Logger
	interval   time.Duration
	deadAfter  time.Duration
	pid        *atomic.Int64
	reregister func(context.Context) error

	mu sync.Mutex
	// next is when the next beat is due: interval after the last began.
	next time.Time
	// reaps counts the beats that found the process presumed dead.
	reaps atomic.Uint64
}

// New returns the heartbeat loop of the process pid names, just
// registered (its first beat is due interval from now); see Run.
func New(s *engine.Store, c clock.Clock, sc engine.Clock, log *slog.Logger, interval, deadAfter time.Duration, pid *atomic.Int64, reregister func(context.Context) error) *Loop {
	return &Loop{s: s, c: c, sc: sc, log: log, interval: interval, deadAfter: deadAfter, pid: pid, reregister: reregister,
		next: c.Now().Add(interval)}
}

// Run beats every interval until ctx is done; a beat BeatIfDue made
// meanwhile puts its next one off.
func (l *Loop) Run(ctx context.Context) {
	t := l.c.NewTimer(l.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		t.Reset(l.BeatIfDue(ctx))
	}
}

// BeatIfDue beats now if a beat is due (interval has passed since the
// last one began), after any beat under way, and returns how long until
// the next one is: interval after this one began, however long it took,
// so that the time a beat's reap takes is not added to the time between
// heartbeats (none, when the beat took longer than interval).
func (l *Loop) BeatIfDue(ctx context.Context) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.c.Now()
	if now.Before(l.next) {
		return l.next.Sub(now)
	}
	if Beat(ctx, l.s, l.sc, l.log, l.deadAfter, l.pid, l.reregister) {
		l.reaps.Add(1)
	}
	l.next = now.Add(l.interval)
	return max(l.next.Sub(l.c.Now()), 0)
}

// Reaps returns how many of the loop's beats found the process presumed
// dead (its row gone, its jobs released), whether or not it registered
// again then: a process that does its work inline compares it before and
// after a beat to learn that the claim it had made is no longer its own.
// The process id alone would not tell it when registering again failed,
// or landed with its reply lost.
func (l *Loop) Reaps() uint64 {
	return l.reaps.Load()
}

// Beat is one round of Run: it stamps the process's heartbeat, then
// reaps the processes presumed dead, never its own (its stamp may read
// older than the time the reap reads, after a clock's jump or a stall of
// the host between them). The reap waits for no lock another
// transaction holds (engine.Store.ReapDeadProcesses), so it cannot hold
// off the next heartbeat for long: a reap that waited on a lock held
// elsewhere (an app's open transaction, a lost host's) would stop this
// process's heartbeats, and it would be presumed dead in turn. It
// reports whether it found the process presumed dead, whether or not
// registering again then succeeded.
func Beat(ctx context.Context, s *engine.Store, sc engine.Clock, log *slog.Logger, deadAfter time.Duration, pid *atomic.Int64, reregister func(context.Context) error) (reaped bool) {
	alive, err := s.Heartbeat(ctx, pid.Load(), sc)
	switch {
	case err != nil:
		log.Warn("sluice: heartbeat failed", "err", err)
	case !alive:
		reaped = true
		log.Warn("sluice: this process was presumed dead and its jobs released; registering again", "process_id", pid.Load())
		if err := reregister(ctx); err != nil {
			log.Error("sluice: register again", "err", err)
		}
	}
	if n, err := s.ReapDeadProcessesBut(ctx, sc, deadAfter, pid.Load()); err != nil {
		log.Warn("sluice: look for dead processes", "err", err)
	} else if n > 0 {
		log.Warn("sluice: released the jobs of dead processes", "jobs", n)
	}
	return reaped
}
