package jobs

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
)

// slotDeclarations are the concurrency limits a worker declares, at its
// start, on the semaphores of the keys they cover, as an enqueue of each
// key would (engine.Store.DeclareSemaphores): a deploy that raised To
// reaches a backlog of blocked jobs without waiting for a new job of
// their very key. Each scope is walked once, skipping the semaphores
// another transaction holds; those are then declared on one at a time,
// each waiting for its lock as an enqueue would, so that the starts that
// wait on a held key declare on it in the order they queued for it. After
// that nothing runs.
type slotDeclarations struct {
	// limits are the declared limits, by scope.
	limits map[string]concurrency.Spec
	// mixed are the scopes (Groups), sorted, whose kinds declare
	// different limits (Check's W005): each enqueue declares its own
	// kind's, and a worker's start none.
	mixed []string

	mu     sync.Mutex
	warned bool
	// walked are the scopes declared on whole; held the semaphores of
	// each that another transaction held then, left to declare on.
	walked map[string]bool
	held   map[string][]string
}

// newSlotDeclarations returns the concurrency limits reg declares, or nil
// when it declares none: such a worker runs no statement for them.
func newSlotDeclarations(reg *Registry) *slotDeclarations {
	scopes := reg.concScopes()
	if len(scopes) == 0 {
		return nil
	}
	d := &slotDeclarations{limits: map[string]concurrency.Spec{}, walked: map[string]bool{}, held: map[string][]string{}}
	for scope, kinds := range scopes {
		if mixedLimits(kinds) {
			d.mixed = append(d.mixed, scope)
			continue
		}
		for _, spec := range kinds {
			d.limits[scope] = spec
			break
		}
	}
	slices.Sort(d.mixed)
	return d
}

// restart forgets what an earlier Run or Drain declared: each start
// declares the limits anew, as a new worker's would, since another
// version's start or enqueue may have declared other limits in between.
func (d *slotDeclarations) restart() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.walked)
	clear(d.held)
}

// mixedLimits reports whether the kinds of a concurrency scope declare
// different limits: differ in what a semaphore records of one (To or
// Duration).
func mixedLimits(kinds map[string]concurrency.Spec) bool {
	specs := slices.Collect(maps.Values(kinds))
	return slices.ContainsFunc(specs, func(s concurrency.Spec) bool { return s.To != specs[0].To || s.Duration != specs[0].Duration })
}

// declare declares each limit on the semaphores of its scope, walking
// each scope not walked yet and skipping the semaphores another
// transaction holds; then, with wait, on those held, one at a time,
// waiting for each one's lock. It returns the errors of the calls that
// failed, whose scopes or keys the next call tries again.
func (d *slotDeclarations) declare(ctx context.Context, s *engine.Store, c engine.Clock, log *slog.Logger, wait bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.warned {
		d.warned = true
		for _, scope := range d.mixed {
			log.Warn("sluice: the kinds of a concurrency group declare different limits; the worker's start declares none on its keys, whose limit is the one their last enqueue declared",
				"group", scope)
		}
	}
	var errs []error
	for _, scope := range slices.Sorted(maps.Keys(d.limits)) {
		spec := d.limits[scope]
		decl := engine.SlotDeclaration{Scope: scope, To: spec.To, Duration: spec.Duration}
		if !d.walked[scope] {
			got, err := s.DeclareSemaphores(ctx, c, decl)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			d.walked[scope], d.held[scope] = true, got.Busy
			declaredLog(log, scope, spec, got)
		}
		if !wait {
			continue
		}
		var left []string
		for keys := d.held[scope]; len(keys) > 0; {
			if ctx.Err() != nil {
				left = append(left, keys...)
				break
			}
			decl.Keys, decl.Wait = keys[:1], true
			got, err := s.DeclareSemaphores(ctx, c, decl)
			if err != nil {
				// Tried again at the next call, after the others.
				errs, left = append(errs, err), append(left, keys[0])
				keys = keys[1:]
				continue
			}
			// A key whose row was made again while the declaration
			// waited for it is declared on again, after the others.
			keys = append(keys[1:], got.Busy...)
			declaredLog(log, scope, spec, got)
		}
		d.held[scope] = left
	}
	return errors.Join(errs...)
}

// pending reports whether a scope is left to walk or a held key to
// declare on.
func (d *slotDeclarations) pending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for scope := range d.limits {
		if !d.walked[scope] || len(d.held[scope]) > 0 {
			return true
		}
	}
	return false
}

// declaredLog logs what a declaration of spec on scope did.
func declaredLog(log *slog.Logger, scope string, spec concurrency.Spec, got engine.Declared) {
	if got.Changed > 0 {
		log.Info("sluice: declared a concurrency limit on the keys that recorded another", "scope", scope, "to", spec.To,
			"keys", got.Changed, "unblocked", got.Unblocked)
	}
	if len(got.Busy) > 0 {
		log.Debug("sluice: concurrency keys held by another transaction; the worker declares their limit as soon as it ends",
			"scope", scope, "keys", len(got.Busy))
	}
}
