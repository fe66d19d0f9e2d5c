package jobs

import (
	"context"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// loop claims while there are free slots and waits otherwise, until ctx
// is done. It also wakes at each slot its claims handed to a rate-limited
// job, and then looks for the jobs that waited for it (as it does on each
// poll), so a backlog drains at its limit's pace.
func (w *Worker) loop(ctx, jobsCtx context.Context, wake <-chan struct{}) {
	failures := 0
	promote := w.limits != nil
	w.leftovers = w.mayHaveLeftovers()
	for ctx.Err() == nil {
		if w.strayClaims > 0 {
			// The release after a failed claim failed (the connection
			// was still down): again before each round until it lands.
			w.lookForStrays(ctx)
		}
		full, err := w.claimRound(ctx, jobsCtx, promote)
		pause := w.cfg.PollInterval
		if err != nil {
			w.strayClaims = min(w.strayClaims+1, maxStrayClaims)
			w.lookForStrays(ctx)
			if ctx.Err() != nil {
				return
			}
			failures++
			pause = min(pause<<min(failures, 6), 5*time.Second)
			w.log.Error("sluice: claim failed", "err", err, "retry_in", pause)
		} else {
			failures = 0
		}
		var freed <-chan struct{}
		if err == nil {
			pause, freed = w.pause(full)
		}
		t := w.clock.NewTimer(pause)
		polled := false
		select {
		case <-ctx.Done():
		case <-wake:
		case <-freed:
		case <-t.C():
			polled = true
		}
		t.Stop()
		promote = w.limits != nil && (polled || w.slots.due(w.clock.Now()))
		w.leftovers = w.leftovers || w.mayHaveLeftovers() && !w.clock.Now().Before(w.leftoversAt)
	}
}

// pause says how long the loop waits after a claim round that succeeded,
// and the channel that ends the wait early. With every slot taken it waits
// for one to free (jobs are likely waiting), polling meanwhile; otherwise
// it waits for the next poll, or the next slot its claims handed a
// rate-limited job, or, when the last claim left jobs whose budget another
// claim held, only MinInterval: that claim has decided them by then.
func (w *Worker) pause(full bool) (time.Duration, <-chan struct{}) {
	pause := w.cfg.PollInterval
	if full {
		return pause, w.freed
	}
	if wait, ok := w.slots.next(w.clock.Now()); ok {
		pause = min(pause, wait)
	}
	if w.yielded {
		pause = min(pause, MinInterval)
	}
	return pause, nil
}

// claimRound claims for the free slots, claiming again at once (up to
// maxClaimsPerPoll times) while claims defer jobs and slots stay free.
// With promote, its first claim takes the waiting jobs that are due. It
// reports whether the last claim filled every slot.
func (w *Worker) claimRound(ctx, jobsCtx context.Context, promote bool) (bool, error) {
	for round := 0; round < maxClaimsPerPoll; round++ {
		free := w.free()
		if free == 0 {
			return true, nil
		}
		window := min(w.window, free)
		// A sweep of this process deferring a flood out of the limited
		// jobs' index is left to it: rather than skip over its locked rows
		// or move the budget's cursor under it, claims take the limited
		// jobs before and after the flood.
		swept := w.store.Swept(w.cfg.Queues)
		pid := w.pid.Load()
		res, err := w.claim(ctx, pid, free, window, swept, promote || w.limits != nil && w.slots.due(w.clock.Now()))
		if err != nil {
			return false, err
		}
		w.adaptWindow(res, window)
		w.yielded = res.Yielded > 0
		w.sweep(ctx, w.overflowing(res))
		for _, j := range res.Jobs {
			w.start(jobsCtx, j, pid)
		}
		if len(res.Jobs) == free {
			return true, nil
		}
		if len(res.Deferred) == 0 && !res.MoreLimited && res.Yielded == 0 {
			return false, nil
		}
	}
	return w.free() == 0, nil
}

// adaptWindow narrows how many rate-limited jobs the next claim decides
// while claims defer more of them than they admit (a flood on a tight
// budget at the head of the queue, which DeferOverflow is moving out of the
// way), and widens it again, up to the free slots, as they admit.
func (w *Worker) adaptWindow(res *engine.ClaimResult, window int) {
	deferred := len(res.Deferred) + len(res.Unfit)
	admitted := countLimited(res.Jobs)
	// A claim that admitted rate-limited jobs tells the next which budgets
	// to lock with its candidates, saving a round trip.
	w.budgetHint = nil
	if admitted > 0 && len(res.Budgets) <= maxBudgetHint {
		w.budgetHint = res.Budgets
	}
	w.adaptSnapshot(res, deferred)
	switch {
	case window <= 0, res.Yielded > 0:
		// Candidates left to the next claim say nothing about the
		// budgets: it decides them with the same window.
	case deferred > admitted:
		w.window = max(window/2, minCandidates)
	case deferred == 0 && res.MoreLimited:
		w.window = w.cfg.Concurrency
	case admitted > 0:
		w.window = min(w.window*2, w.cfg.Concurrency)
	}
}

// snapshotProbe is how many claims a worker makes on locked budgets
// before it tries a snapshot of them again, once snapshotAlone snapshots
// in a row found no other claim taking turns on them.
const (
	snapshotProbe = 16
	snapshotAlone = 3
)

// adaptSnapshot decides whether the next claim decides on a snapshot of
// its budgets first (engine.ClaimParams.SnapshotHint): while claims defer
// nothing and other claims take turns on the same budgets. Without such
// claims a snapshot only costs a round trip, so a worker that finds none
// in snapshotAlone snapshots tries again after snapshotProbe claims.
func (w *Worker) adaptSnapshot(res *engine.ClaimResult, deferred int) {
	switch {
	case deferred > 0 || len(w.budgetHint) == 0:
		w.snapshotHint, w.snapshotIn, w.snapshotAlone = false, snapshotProbe, 0
	case w.snapshotHint && res.Contended:
		w.snapshotAlone = 0
	case w.snapshotHint:
		w.snapshotAlone++
		if w.snapshotAlone >= snapshotAlone {
			w.snapshotHint, w.snapshotIn, w.snapshotAlone = false, snapshotProbe, 0
		}
	default:
		w.snapshotIn--
		w.snapshotHint = w.snapshotIn <= 0
	}
}

// claim takes up to max ready jobs (deciding up to window of them against
// their limits, none of those left to this process's sweeps, and first
// taking the due waiting jobs when promote is set) and reports the claim
// to the hooks and the log.
func (w *Worker) claim(ctx context.Context, pid int64, max, window int, swept map[string]*engine.Span, promote bool) (*engine.ClaimResult, error) {
	began := time.Now()
	hostBegan := w.clock.Now()
	res, err := w.store.Claim(ctx, engine.ClaimParams{
		ProcessID:    pid,
		Queues:       w.cfg.Queues,
		Max:          max,
		Candidates:   window,
		Clock:        w.storeClock(),
		Limits:       w.claimLimits(),
		Fair:         w.reg.hasFair() || w.leftovers,
		Horizon:      w.cfg.Horizon,
		PromoteDue:   promote && w.limits != nil,
		DueLead:      w.slots.leadTime(),
		BudgetHint:   w.budgetHint,
		SnapshotHint: w.snapshotHint,
		Swept:        swept,
	})
	if err != nil {
		return nil, err
	}
	if w.limits != nil {
		w.slots.note(res, hostBegan, w.clock.Now())
	}
	if w.leftovers {
		w.leftoversAt = w.clock.Now().Add(w.cfg.PollInterval)
		w.leftovers = w.limits == nil && (res.MoreLimited || countLimited(res.Jobs) > 0) || !w.reg.hasFair() && res.FairCandidates > 0
	}
	if w.hooks.OnClaim != nil {
		w.hooks.OnClaim(ClaimEvent{Claimed: len(res.Jobs), Deferred: len(res.Deferred) + len(res.Displaced), Duration: time.Since(began), DecidedAt: res.DecidedAt})
	}
	w.report(res)
	return res, nil
}

// mayHaveLeftovers reports whether a declaration the worker lacks may
// have left jobs no one else claims: with no limit declared, the ready
// jobs that carry a rate-limit key; with no fair kind, the fair jobs of a
// kind whose Fair a deploy removed (they carry their fairness keys, which
// only the fair stream reads).
func (w *Worker) mayHaveLeftovers() bool {
	return w.limits == nil || !w.reg.hasFair()
}

// claimLimits returns the limits claims decide against; with no limit
// declared, nil (a plain claim), or none at all while the worker takes the
// jobs a removed limit left with their keys (leftovers).
func (w *Worker) claimLimits() engine.Limits {
	switch {
	case w.limits != nil:
		return w.limits
	case w.leftovers:
		return noLimits{}
	}
	return nil
}

// countLimited counts the jobs of js that carry a rate-limit key.
func countLimited(js []*engine.Job) int {
	n := 0
	for _, j := range js {
		if len(j.RateKeys) > 0 {
			n++
		}
	}
	return n
}

func (w *Worker) free() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cfg.Concurrency - len(w.running)
}
