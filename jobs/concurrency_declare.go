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
// their very key. A scope is declared on once; its semaphores another
// transaction held then are declared on again at each later call, until
// none is left; after that nothing runs.
type slotDeclarations struct {
	// limits are the declared limits, by scope.
	limits map[string]concurrency.Spec
	// mixed are the scopes (Groups), sorted, whose kinds declare
	// different limits (Check's W005): each enqueue declares its own
	// kind's, and a worker's start none.
	mixed []string

	mu     sync.Mutex
	warned bool
	// walked are the scopes declared on whole; busy the semaphores of
	// each that another transaction held, left to declare on.
	walked map[string]bool
	busy   map[string][]string
}

// newSlotDeclarations returns the concurrency limits reg declares, or nil
// when it declares none: such a worker runs no statement for them.
func newSlotDeclarations(reg *Registry) *slotDeclarations {
	scopes := reg.concScopes()
	if len(scopes) == 0 {
		return nil
	}
	d := &slotDeclarations{limits: map[string]concurrency.Spec{}, walked: map[string]bool{}, busy: map[string][]string{}}
	for scope, kinds := range scopes {
		specs := slices.Collect(maps.Values(kinds))
		if slices.ContainsFunc(specs, func(s concurrency.Spec) bool { return !sameLimit(s, specs[0]) }) {
			d.mixed = append(d.mixed, scope)
			continue
		}
		d.limits[scope] = specs[0]
	}
	slices.Sort(d.mixed)
	return d
}

// sameLimit reports whether two specs declare the same limit: what a
// semaphore records of one (To and Duration).
func sameLimit(a, b concurrency.Spec) bool { return a.To == b.To && a.Duration == b.Duration }

// declare declares each limit on the semaphores of its scope not declared
// on yet (all of them at the first call), and returns the errors of those
// whose call failed, which the next call tries again.
func (d *slotDeclarations) declare(ctx context.Context, s *engine.Store, c engine.Clock, log *slog.Logger) error {
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
		walked := d.walked[scope]
		if walked && len(d.busy[scope]) == 0 {
			continue
		}
		spec := d.limits[scope]
		decl := engine.SlotDeclaration{Scope: scope, To: spec.To, Duration: spec.Duration}
		if walked {
			decl.Keys = d.busy[scope]
		}
		got, err := s.DeclareSemaphores(ctx, c, decl)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d.walked[scope], d.busy[scope] = true, got.Busy
		if got.Changed > 0 {
			log.Info("sluice: declared a concurrency limit on the keys that recorded another", "scope", scope, "to", spec.To,
				"keys", got.Changed, "unblocked", got.Unblocked)
		}
		if len(got.Busy) > 0 {
			log.Debug("sluice: concurrency keys held by another transaction; the worker declares their limit again at its next refresh",
				"scope", scope, "keys", len(got.Busy))
		}
	}
	return errors.Join(errs...)
}
