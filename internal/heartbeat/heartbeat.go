// Package heartbeat is the loop every sluice process (worker or
// dispatcher) runs to stay registered and to recover the jobs of processes
// that died.
package heartbeat

import (
	"context"
	"log/slog"
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
	t := c.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		Beat(ctx, s, sc, log, deadAfter, pid, reregister)
		t.Reset(interval)
	}
}

// Beat is one round of Run.
func Beat(ctx context.Context, s *engine.Store, sc engine.Clock, log *slog.Logger, deadAfter time.Duration, pid *atomic.Int64, reregister func(context.Context) error) {
	alive, err := s.Heartbeat(ctx, pid.Load(), sc)
	switch {
	case err != nil:
		log.Warn("sluice: heartbeat failed", "err", err)
	case !alive:
		log.Warn("sluice: this process was presumed dead and its jobs released; registering again", "process_id", pid.Load())
		if err := reregister(ctx); err != nil {
			log.Error("sluice: register again", "err", err)
		}
	}
	if n, err := s.ReapDeadProcesses(ctx, sc, deadAfter); err != nil {
		log.Warn("sluice: look for dead processes", "err", err)
	} else if n > 0 {
		log.Warn("sluice: released the jobs of dead processes", "jobs", n)
	}
}
