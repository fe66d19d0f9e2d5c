package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// Task is a recurring task: at every tick of Schedule one job of Args is
// enqueued, exactly once however many dispatchers run. Ticks missed while
// no dispatcher ran are not replayed.
type Task struct {
	// Key names the task; it must be unique, and a key as every database
	// stores alike: 1 to 255 bytes of valid UTF-8, no control characters,
	// no trailing space.
	Key string
	// Schedule is a cron expression with an optional seconds field
	// ("0 3 * * *", "*/30 * * * * *") or a descriptor ("@hourly",
	// "@every 5m"), after an optional time zone ("CRON_TZ=Europe/Paris
	// 0 3 * * *"); see ParseSchedule. Without a zone it ticks in the
	// local time of each dispatcher's clock: dispatchers in different
	// zones tick it at different instants, each of which runs, so give
	// every dispatcher the same zone, or name one here.
	Schedule string
	// Args are the job's args; its kind must be registered.
	Args jobs.Args
	// Options apply to each enqueue (queue, priority, …).
	Options []jobs.EnqueueOption
}

// MaintenanceTask is a built-in task's schedule.
type MaintenanceTask struct {
	// Schedule overrides the task's default schedule.
	Schedule string
	// Off turns the task off.
	Off bool
}

// Maintenance configures the dispatcher's built-in tasks.
type Maintenance struct {
	// ClearIdleBudgets deletes rate-limit budgets that admit exactly as a
	// missing row would, 500 at a time with 300ms between batches, the
	// fairness keys whose next job would start at their queue's virtual
	// time anyway (docs/fairness.md), and, in batches as well, the
	// semaphores of concurrency keys that hold no slot, have no blocked
	// job and saw no activity for an hour (docs/concurrency.md), and the
	// rows of coalesce keys whose job no longer holds the key
	// (docs/coalesce.md). Defaults to "@hourly".
	ClearIdleBudgets MaintenanceTask
	// ClearFinishedJobs deletes completed and cancelled jobs older than
	// Retention, in batches of 500, and the records of ticks older than a
	// week (or Retention, if longer) but each task's latest. Defaults to
	// "@hourly".
	ClearFinishedJobs MaintenanceTask
	// Retention is how long finished jobs are kept. Defaults to 24 hours.
	Retention time.Duration
	// FreeExpiredSlots frees concurrency slots whose holders were
	// presumed lost and hands free slots to blocked jobs. It is idempotent
	// and runs in every dispatcher. Defaults to "@every 1s".
	FreeExpiredSlots MaintenanceTask
}

// builtinPrefix begins the built-in tasks' keys, which no task of the
// app's may take.
const builtinPrefix = "sluice."

// Names of the built-in tasks.
const (
	TaskClearIdleBudgets  = "sluice.clear_idle_budgets"
	TaskClearFinishedJobs = "sluice.clear_finished_jobs"
	TaskFreeExpiredSlots  = "sluice.free_expired_slots"
)

// DefaultRetention is how long finished jobs are kept.
const DefaultRetention = 24 * time.Hour

// task is a compiled recurring task.
type task struct {
	key      string
	spec     string
	schedule cron.Schedule
	item     *jobs.Item // a job to enqueue each tick, or
	run      func(ctx context.Context, now time.Time) (int, error)
	// once records each tick, so it runs once across dispatchers.
	once bool
	next time.Time
	// noTick is set while the schedule finds no tick, once it was logged.
	noTick bool
	// background marks a maintenance task that may take long (many
	// batches): under Run it runs beside the dispatcher's ticks, so that
	// promotions and the other tasks keep their pace. busy is set while it
	// runs there.
	background, busy bool
	// owed is the tick of a clean-up (a task that records its ticks and
	// works after the record's transaction) that this dispatcher holds
	// and whose work has not succeeded: it recorded the tick, or may have
	// (the record's commit failed with its outcome unknown), and no other
	// dispatcher runs a tick it finds recorded. So this one runs the work
	// again on each round, until it succeeds or a later tick comes,
	// recording the tick first if no dispatcher has. Zero when nothing is
	// owed.
	owed time.Time
}

// taskDone is what a task run in the background reports to the next
// round of ticks.
type taskDone struct {
	t    *task
	now  time.Time
	owed time.Time
	err  error
}

// compileTasks checks every task and built-in, failing with the name of
// the first bad one.
func (d *Dispatcher) compileTasks(cfg Config) error {
	seen := map[string]bool{}
	for _, t := range cfg.Tasks {
		if t.Key == "" {
			return fmt.Errorf("dispatcher: a recurring task has no Key (schedule %q)", t.Schedule)
		}
		if err := engine.CheckKey("recurring task key", t.Key); err != nil {
			return fmt.Errorf("dispatcher: %w", err)
		}
		switch {
		case seen[t.Key]:
			return fmt.Errorf("dispatcher: recurring task %s is declared twice", t.Key)
		case t.Args == nil:
			return fmt.Errorf("dispatcher: recurring task %s has no Args", t.Key)
		case strings.HasPrefix(t.Key, builtinPrefix):
			return fmt.Errorf("dispatcher: recurring task %s: keys starting %q are the built-in tasks'; set Config.Maintenance to change those", t.Key, builtinPrefix)
		case cfg.Client == nil:
			return fmt.Errorf("dispatcher: recurring task %s needs Config.Client to enqueue its jobs", t.Key)
		}
		seen[t.Key] = true
		sched, err := ParseSchedule(t.Schedule)
		if err != nil {
			return fmt.Errorf("dispatcher: recurring task %s: schedule %q: %w", t.Key, t.Schedule, err)
		}
		item := jobs.Item{Args: t.Args, Options: t.Options}
		// LoadConfigToList's stand-in for an unknown kind is only listed,
		// never run: every other task must be one an enqueue takes.
		if _, listed := t.Args.(unregistered); !listed {
			if err := cfg.Client.Check(item); err != nil {
				return fmt.Errorf("dispatcher: recurring task %s: %w", t.Key, err)
			}
		}
		d.tasks = append(d.tasks, &task{key: t.Key, spec: t.Schedule, schedule: sched, item: &item, once: true})
	}
	m := cfg.Maintenance
	retention := m.Retention
	if retention <= 0 {
		retention = DefaultRetention
	}
	builtins := []struct {
		key  string
		mt   MaintenanceTask
		def  string
		once bool
		run  func(ctx context.Context, now time.Time) (int, error)
	}{
		{TaskClearIdleBudgets, m.ClearIdleBudgets, "@hourly", true, func(ctx context.Context, now time.Time) (int, error) {
			return d.clearIdleRows(ctx)
		}},
		{TaskClearFinishedJobs, m.ClearFinishedJobs, "@hourly", true, func(ctx context.Context, now time.Time) (int, error) {
			// Each step runs whatever the other did (as clearIdleRows).
			n, err := d.store.DeleteFinished(ctx, now.Add(-retention), 500)
			if n > 0 {
				d.log.Info("sluice: deleted finished jobs", "count", n, "older_than", retention)
			}
			_, tickErr := d.store.DeleteTicks(ctx, now.Add(-max(retention, 7*24*time.Hour)))
			return n, errors.Join(err, tickErr)
		}},
		{TaskFreeExpiredSlots, m.FreeExpiredSlots, "@every 1s", false, func(ctx context.Context, now time.Time) (int, error) {
			freed, unblocked, err := d.store.MaintainSemaphores(ctx, d.storeClock(), 100)
			if freed > 0 {
				d.log.Warn("sluice: freed concurrency slots whose holders were presumed lost", "keys", freed, "unblocked", unblocked)
			}
			return unblocked, err
		}},
	}
	for _, b := range builtins {
		spec := b.mt.Schedule
		if spec == "" {
			spec = b.def
		}
		if b.mt.Off {
			d.off = append(d.off, TaskInfo{Key: b.key, Schedule: spec})
			continue
		}
		sched, err := ParseSchedule(spec)
		if err != nil {
			return fmt.Errorf("dispatcher: built-in task %s: schedule %q: %w", b.key, spec, err)
		}
		// The clean-ups recorded once per tick delete in batches until they
		// are done, which may take long: under Run they go beside the ticks.
		d.tasks = append(d.tasks, &task{key: b.key, spec: spec, schedule: sched, run: b.run, once: b.once, background: b.once})
	}
	now := d.clock.Now()
	for _, t := range d.tasks {
		t.next = t.schedule.Next(now)
	}
	return nil
}

// runTasks runs each task whose next tick has come: the latest tick not
// after now (ticks that passed unrun are not replayed).
func (d *Dispatcher) runTasks(ctx context.Context, now time.Time) (int, error) {
	ran := 0
	var errs []error
	d.finished()
	for _, t := range d.tasks {
		if t.busy || !d.hasNext(t, now) || now.Before(t.next) {
			continue
		}
		tick := latestTick(t.schedule, t.next, now)
		owed := t.owed
		if !owed.Equal(tick) {
			owed = time.Time{} // a later tick came: it is recorded anew
		}
		if t.background && d.done != nil {
			d.inBackground(ctx, t, tick, owed, now)
			continue
		}
		ok, err := d.runTick(ctx, t, tick, owed, now)
		if errors.Is(err, engine.ErrSemaphoreHeld) {
			// Its job's key is held by another transaction: the tick,
			// recorded with its job, rolled back with it, and is tried
			// again on the next round, once the key is free.
			d.log.Debug("sluice: recurring task's concurrency key is held by another transaction; its tick is tried again on the next round", "task", t.key, "err", err)
			t.owed = time.Time{}
			continue
		}
		if err != nil {
			t.owed = owedAfter(t, tick, ok)
			errs = append(errs, err)
			continue // the same tick is tried again on the next round
		}
		t.next, t.owed = t.schedule.Next(now), time.Time{}
		if ok {
			ran++
		}
	}
	return ran, errors.Join(errs...)
}

// owedAfter is what a task owes after a tick of it failed: for a
// clean-up, the tick, when this dispatcher holds it (ok: it recorded it,
// or may have, or owed it already); nothing when its record failed and
// rolled back (so that the next round, here or in another dispatcher,
// records it and runs it), nor for a task that enqueues a job: its job
// commits with its record, so the record found on the next round says
// the tick ran.
func owedAfter(t *task, tick time.Time, ok bool) time.Time {
	if ok && t.once && t.item == nil {
		return tick
	}
	return time.Time{}
}

// inBackground runs a task's tick beside the dispatcher's rounds (Run):
// the round that follows its end moves it to its next tick, or, when it
// failed, tries the same tick again, as for a task run inline.
func (d *Dispatcher) inBackground(ctx context.Context, t *task, tick, owed, now time.Time) {
	t.busy = true
	d.background.Add(1)
	go func() {
		defer d.background.Done()
		ok, err := d.runTick(ctx, t, tick, owed, now)
		r := taskDone{t: t, now: now, err: err}
		if err != nil {
			r.owed = owedAfter(t, tick, ok)
		}
		d.done <- r
	}()
}

// finished applies what the tasks run in the background since the last
// round reported.
func (d *Dispatcher) finished() {
	for {
		select {
		case r := <-d.done:
			r.t.busy = false
			if r.err != nil {
				d.log.Error("sluice: dispatcher task", "task", r.t.key, "err", r.err)
				r.t.owed = r.owed
				continue // the same tick is tried again on the next round
			}
			r.t.next, r.t.owed = r.t.schedule.Next(r.now), time.Time{}
		default:
			return
		}
	}
}

// hasNext reports whether t has a next tick, looking for one again if it
// had none. A schedule may find none: robfig's search gives up after five
// years (February 29th, from that day in 2096 until 2099: 2100 is no leap
// year). Such a task is skipped, and logged once, until a tick comes
// within five years.
func (d *Dispatcher) hasNext(t *task, now time.Time) bool {
	if t.next.IsZero() {
		t.next = t.schedule.Next(now)
	}
	if t.next.IsZero() {
		if !t.noTick {
			d.log.Warn("sluice: recurring task has no tick in the next five years; skipped until it has one", "task", t.key, "schedule", t.spec)
		}
		t.noTick = true
		return false
	}
	t.noTick = false
	return true
}

// latestTick returns the latest tick of s not after now, from tick, a
// tick not after now.
func latestTick(s cron.Schedule, tick, now time.Time) time.Time {
	for n := s.Next(tick); !n.IsZero() && !n.After(now); n = s.Next(n) {
		tick = n
	}
	return tick
}

// runTick runs one tick of t: once across dispatchers when t records its
// ticks. It reports whether it ran; for a clean-up, whose work follows the
// record of its tick, whether this dispatcher holds the tick, even when
// the work then failed or never ran: it recorded it, or owed it already,
// or may have recorded it (RunTick failed with engine.ErrTickUnknown). A
// tick owed (see task.owed) is recorded if no dispatcher has recorded it
// (its record may have rolled back), and its work runs whether or not it
// was: a clean-up is idempotent, so a tick whose record rolled back unseen
// and which another dispatcher then took runs twice, harmlessly, rather
// than in none when the record had landed.
func (d *Dispatcher) runTick(ctx context.Context, t *task, tick, owed, now time.Time) (bool, error) {
	switch {
	case t.item != nil:
		var settle func(error) error
		ran, err := d.store.RunTick(ctx, t.key, tick, now, func(ex engine.Executor) (id int64, err error) {
			// The app's code runs here (enqueue middleware, a kind's
			// Cost): one that panics fails the tick, in its transaction,
			// which rolls back, instead of taking the dispatcher down at
			// every tick.
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("enqueue panicked: %v\n%s", r, debug.Stack())
				}
			}()
			// The enqueue waits for no concurrency key another
			// transaction holds (an app's open one that enqueued a job
			// of the key): it runs in the round, which would wait with
			// it. It fails instead (engine.ErrSemaphoreHeld), and the
			// tick, its record rolled back, is tried on a later round.
			res, s, err := d.cfg.Client.EnqueueIn(engine.WithoutSlotWaits(ctx), ex, []jobs.Item{*t.item})
			if err != nil {
				return 0, err
			}
			settle = s
			return res[0].ID, nil
		})
		// The enqueue's outcome is the tick's transaction's: the
		// middleware learns it, and OnEnqueue reports the job only once
		// it is committed. (RunTick runs the enqueue once: a tick that
		// failed is tried again on the next round, as a new enqueue.)
		if settle != nil {
			if herr := settle(err); herr != nil {
				// The job is enqueued, with its tick: the tick ran.
				d.log.Error("sluice: recurring task enqueued its job, and the client's OnEnqueue panicked", "task", t.key, "err", herr)
			}
		}
		return ran, err
	case t.once:
		held := !owed.IsZero()
		ok, err := d.store.RunTick(ctx, t.key, tick, now, nil)
		switch {
		case err != nil:
			return held || errors.Is(err, engine.ErrTickUnknown), err
		case !ok && !held:
			return false, nil // another dispatcher's
		}
		_, err = t.run(ctx, now)
		return true, err
	default:
		_, err := t.run(ctx, now)
		return err == nil, err
	}
}

// TaskInfo describes a recurring task for listings.
type TaskInfo struct {
	// Key names the task.
	Key string
	// Schedule is its cron expression (or @every …).
	Schedule string
	// Kind is the enqueued job's kind; empty for built-in tasks.
	Kind string
	// Next is the next tick after now; zero for a task turned off.
	Next time.Time
	// Enabled is false for a built-in task the configuration turned off
	// (it never runs); every other task is enabled.
	Enabled bool
	// Last is the latest recorded tick, zero if none (or for tasks that
	// run in every dispatcher without recording ticks).
	Last engine.Tick
}

// Tasks lists the dispatcher's tasks, in key order, with their next ticks
// and, from the database, their latest recorded ones.
func (d *Dispatcher) Tasks(ctx context.Context) ([]TaskInfo, error) {
	last, err := d.store.LastTicks(ctx)
	if err != nil {
		return nil, err
	}
	now := d.clock.Now()
	out := make([]TaskInfo, 0, len(d.tasks))
	for _, t := range d.tasks {
		info := TaskInfo{Key: t.key, Schedule: t.spec, Next: t.schedule.Next(now), Last: last[t.key], Enabled: true}
		if t.item != nil {
			info.Kind = t.item.Args.Kind()
		}
		out = append(out, info)
	}
	for _, t := range d.off {
		t.Last = last[t.Key]
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}
