package jobs

import (
	"context"
	"sync/atomic"

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
	declared := v.reg.QueueLimits(queue)
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

// refresh reads the overrides from the database.
func (v *limitsView) refresh(ctx context.Context, s *engine.Store) error {
	list, err := s.ListOverrides(ctx)
	if err != nil {
		return err
	}
	m := make(map[string]engine.Override, len(list))
	for _, o := range list {
		m[o.Target] = o
	}
	v.overrides.Store(&m)
	return nil
}
