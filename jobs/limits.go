package jobs

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/ratelimit"
)

// noLimits are the limits of a worker that declares none, for its claims
// that take the jobs a removed limit left with their keys: no limit applies
// to them, so they are admitted unchecked.
type noLimits struct{}

// RateSpec implements engine.Limits: no kind declares a limit.
func (noLimits) RateSpec(string, string) (ratelimit.Spec, bool) { return ratelimit.Spec{}, false }

// QueueLimits implements engine.Limits: no queue has a limit.
func (noLimits) QueueLimits(string) []engine.QueueLimit { return nil }

// limitsView is what a worker's claims decide against: the registry's
// limits, with the overrides stored in the database and the worker's
// shadow switch applied.
type limitsView struct {
	reg       *Registry
	shadowAll bool
	overrides atomic.Pointer[map[string]engine.Override]

	// mu guards priced: the limit last handed to the budgets of each
	// target (a scope or a budget key) with Store.Reprice; nil before the
	// first refresh.
	mu     sync.Mutex
	priced map[string]ratelimit.Params
}

// RateSpec implements engine.Limits.
func (v *limitsView) RateSpec(kind, key string) (ratelimit.Spec, bool) {
	s, ok := v.reg.RateSpec(kind, key)
	if !ok {
		return s, false
	}
	return v.apply(key, s), true
}

// QueueLimits implements engine.Limits.
func (v *limitsView) QueueLimits(queue string) []engine.QueueLimit {
	declared := v.reg.queueLimits(queue)
	if len(declared) == 0 {
		return nil
	}
	out := make([]engine.QueueLimit, len(declared))
	for i, l := range declared {
		out[i] = engine.QueueLimit{Key: l.Key, Spec: v.apply(l.Key, l.Spec)}
	}
	return out
}

// apply puts a budget's own override, else its scope's, in place of the
// declared limit, and shadow mode on when the worker asks for it.
func (v *limitsView) apply(key string, s ratelimit.Spec) ratelimit.Spec {
	if o, ok := v.override(key); ok {
		s = o.Spec(s)
	}
	if v.shadowAll {
		s.Shadow = true
	}
	return s
}

// override returns the override that applies to a budget: its own, else
// its scope's.
func (v *limitsView) override(key string) (engine.Override, bool) {
	m := v.overrides.Load()
	if m == nil {
		return engine.Override{}, false
	}
	if o, ok := (*m)[key]; ok {
		return o, true
	}
	o, ok := (*m)[ratelimit.ScopeOf(key)]
	return o, ok
}

// refresh reads the overrides from the database, and hands each limit
// whose spec changed since the last refresh (every limit, at the first) to
// the budgets it covers (reprice).
func (v *limitsView) refresh(ctx context.Context, s *engine.Store, c engine.Clock, horizon time.Duration) error {
	if err := v.load(ctx, s); err != nil {
		return err
	}
	return v.reprice(ctx, s, c, horizon)
}

// load reads the overrides from the database.
func (v *limitsView) load(ctx context.Context, s *engine.Store) error {
	return v.loadIn(ctx, s, nil)
}

// loadIn reads the overrides through ex (nil: the store's pool).
func (v *limitsView) loadIn(ctx context.Context, s *engine.Store, ex engine.Executor) error {
	list, err := s.ListOverridesIn(ctx, ex)
	if err != nil {
		return err
	}
	v.setOverrides(list)
	return nil
}

// setOverrides puts list in place of the overrides the view applies.
func (v *limitsView) setOverrides(list []engine.Override) {
	m := make(map[string]engine.Override, len(list))
	for _, o := range list {
		m[o.Target] = o
	}
	v.overrides.Store(&m)
}

// reprice calls Store.Reprice for each target whose limit is not the one
// last handed to its budgets: a declared limit at the first call (a deploy
// may have changed it), a limit an override set, changed or cleared since.
// A claim brings a changed limit to the budgets it locks, but none locks a
// budget whose jobs are all parked. A target whose call fails is tried
// again at the next refresh.
//
// A budget whose own override was cleared is handed its scope's limit
// once and then forgotten: from then on its scope's target covers it.
func (v *limitsView) reprice(ctx context.Context, s *engine.Store, c engine.Clock, horizon time.Duration) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.priced == nil {
		v.priced = map[string]ratelimit.Params{}
	}
	current := v.currentTargets()
	var errs []error
	for _, target := range v.targets() {
		p, ok := v.limitOn(target)
		if !ok {
			delete(v.priced, target) // no declared limit covers it
			continue
		}
		if last, seen := v.priced[target]; !seen || last != p {
			_, err := s.Reprice(ctx, c, engine.Repricing{Target: target, Params: p, Except: v.ownOverrides(target), Horizon: horizon})
			if err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if _, ok := slices.BinarySearch(current, target); ok {
			v.priced[target] = p
		} else {
			delete(v.priced, target) // handed back to its scope
		}
	}
	return errors.Join(errs...)
}

// targets returns, sorted, what the worker's limits cover
// (currentTargets) and whatever it repriced before and has not yet
// handed back: a budget whose own override was cleared goes back to its
// scope's limit.
func (v *limitsView) targets() []string {
	out := slices.AppendSeq(v.currentTargets(), maps.Keys(v.priced))
	slices.Sort(out)
	return slices.Compact(out)
}

// currentTargets returns, sorted, the targets the worker's limits cover
// now: the declared scopes and limited queues' budgets, and the budgets
// with an override of their own.
func (v *limitsView) currentTargets() []string {
	out := v.reg.limitTargets()
	if m := v.overrides.Load(); m != nil {
		for t := range *m {
			if strings.Contains(t, "/") {
				out = append(out, t)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// limitOn returns the limit in force on a target's budgets: the declared
// limit of its scope (or queue) with the overrides applied, or false when
// the registry declares none.
func (v *limitsView) limitOn(target string) (ratelimit.Params, bool) {
	spec, ok := v.reg.scopeSpec(target)
	if !ok {
		return ratelimit.Params{}, false
	}
	return v.apply(target, spec).Params, true
}

// ownOverrides returns the budgets of a scope that have an override of
// their own; none for a target that is one budget.
func (v *limitsView) ownOverrides(target string) []string {
	m := v.overrides.Load()
	if m == nil || strings.Contains(target, "/") {
		return nil
	}
	var out []string
	for t := range *m {
		if strings.Contains(t, "/") && ratelimit.ScopeOf(t) == target {
			out = append(out, t)
		}
	}
	return out
}
