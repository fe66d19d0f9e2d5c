// Package dispatcher runs the work that no worker does: it promotes due
// scheduled jobs to ready, hands rate-limit slots to parked jobs as the
// horizon reaches them, frees concurrency slots whose holders were lost,
// and recovers the jobs of dead processes. Several
// dispatchers may run against one database; each job is promoted once.
package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/heartbeat"
	"github.com/sluicequeue/sluice/store"
)

// Defaults.
const (
	DefaultInterval          = time.Second
	DefaultBatchSize         = 500
	DefaultHeartbeatInterval = 60 * time.Second
	DefaultDeadAfter         = 5 * time.Minute
)

// Config configures a Dispatcher. The zero value is usable.
type Config struct {
	// Interval is how often the dispatcher looks for due jobs; while a
	// full batch comes back it looks again at once. Defaults to 1s.
	Interval time.Duration
	// BatchSize is how many jobs one promotion moves. Defaults to 500.
	BatchSize int
	// Horizon is how far ahead parked jobs get rate-limit slots. Defaults
	// to 5 minutes, as the workers'.
	Horizon time.Duration
	// HeartbeatInterval and DeadAfter are as the worker's: 60s and 5
	// minutes by default.
	HeartbeatInterval time.Duration
	DeadAfter         time.Duration
	// Clock drives every decision. Defaults to the system clock.
	Clock clock.Clock
	// ClearIdleBudgetsEvery is how often the dispatcher deletes rate-limit
	// budgets that admit exactly as a missing row would (see
	// store.ClearIdleBudgets), in batches of 500 with 300ms between them.
	// Defaults to an hour; negative turns it off.
	ClearIdleBudgetsEvery time.Duration
	// Name labels the process row. Defaults to the host name.
	Name string
	// Logger receives the dispatcher's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// Dispatcher promotes scheduled jobs and keeps parked ones moving.
type Dispatcher struct {
	cfg   Config
	store *store.Store
	clock clock.Clock
	log   *slog.Logger
	pid   atomic.Int64
	// nextClear is when idle budgets are next cleared.
	nextClear time.Time
}

// New returns a dispatcher over s.
func New(s *store.Store, cfg Config) *Dispatcher {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.Horizon <= 0 {
		cfg.Horizon = store.DefaultHorizon
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.DeadAfter <= 0 {
		cfg.DeadAfter = DefaultDeadAfter
	}
	if cfg.ClearIdleBudgetsEvery == 0 {
		cfg.ClearIdleBudgetsEvery = time.Hour
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Dispatcher{cfg: cfg, store: s, clock: clock.OrSystem(cfg.Clock), log: log}
}

// TickResult counts what one tick did.
type TickResult struct {
	// Promoted counts scheduled jobs made ready.
	Promoted int
	// Unparked counts parked jobs given a slot.
	Unparked int
	// Full is set when a promotion came back full: more may be due.
	Full bool
	// ClearedBudgets counts idle budgets deleted.
	ClearedBudgets int
	// FreedKeys counts concurrency keys whose slots expired and were
	// freed; Unblocked counts blocked jobs given a slot.
	FreedKeys, Unblocked int
}

// Tick runs one round: it promotes one batch of due jobs, hands slots to
// parked jobs whose budgets' horizons reached them, frees expired
// concurrency slots and hands free ones to blocked jobs, and, when it is
// time, clears idle budgets.
func (d *Dispatcher) Tick(ctx context.Context) (TickResult, error) {
	now := d.clock.Now()
	n, _, err := d.store.Promote(ctx, now, d.cfg.BatchSize)
	if err != nil {
		return TickResult{}, fmt.Errorf("dispatcher: %w", err)
	}
	res := TickResult{Promoted: n, Full: n == d.cfg.BatchSize}
	if res.Unparked, err = d.store.Unpark(ctx, now, d.cfg.Horizon, 100); err != nil {
		return res, fmt.Errorf("dispatcher: %w", err)
	}
	if res.FreedKeys, res.Unblocked, err = d.store.MaintainSemaphores(ctx, now, 100); err != nil {
		return res, fmt.Errorf("dispatcher: %w", err)
	}
	if res.FreedKeys > 0 {
		d.log.Warn("sluice: freed concurrency slots whose holders were presumed lost", "keys", res.FreedKeys, "unblocked", res.Unblocked)
	}
	if d.cfg.ClearIdleBudgetsEvery > 0 && !now.Before(d.nextClear) {
		d.nextClear = now.Add(d.cfg.ClearIdleBudgetsEvery)
		if res.ClearedBudgets, err = d.store.ClearIdleBudgets(ctx, d.clock.Now, 500, 300*time.Millisecond); err != nil {
			return res, fmt.Errorf("dispatcher: %w", err)
		}
		if res.ClearedBudgets > 0 {
			d.log.Info("sluice: cleared idle rate-limit budgets", "count", res.ClearedBudgets)
		}
	}
	return res, nil
}

// Run ticks every Interval (at once again after a full batch) until ctx is
// done. It registers the dispatcher as a process and heartbeats, and
// refuses to start against a database with pending migrations.
func (d *Dispatcher) Run(ctx context.Context) error {
	if err := d.store.CheckSchema(ctx); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	if err := d.register(ctx); err != nil {
		return err
	}
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	beaten := make(chan struct{})
	go func() {
		defer close(beaten)
		heartbeat.Run(beatCtx, d.store, d.clock, d.log, d.cfg.HeartbeatInterval, d.cfg.DeadAfter, &d.pid, d.register)
	}()
	d.log.Info("sluice: dispatcher started", "process_id", d.pid.Load(), "interval", d.cfg.Interval, "batch_size", d.cfg.BatchSize)
	for ctx.Err() == nil {
		res, err := d.Tick(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.Error("sluice: dispatcher tick", "err", err)
		}
		if res.Full {
			continue
		}
		t := d.clock.NewTimer(d.cfg.Interval)
		select {
		case <-ctx.Done():
		case <-t.C():
		}
		t.Stop()
	}
	stopBeat()
	<-beaten
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.store.DeregisterProcess(bg, d.pid.Load()); err != nil {
		d.log.Warn("sluice: deregister", "err", err)
	}
	d.log.Info("sluice: dispatcher stopped", "process_id", d.pid.Load())
	return nil
}

func (d *Dispatcher) register(ctx context.Context) error {
	host, _ := os.Hostname()
	pid, err := d.store.RegisterProcess(ctx, store.Process{Kind: "dispatcher", Name: d.cfg.Name, Hostname: host, PID: os.Getpid()}, d.clock.Now())
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	d.pid.Store(pid)
	return nil
}
