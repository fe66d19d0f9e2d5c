package store

import (
	"context"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// Override replaces a declared rate limit without a restart: for one
// budget (Target is its key, such as "Stripe/Account/7") or for every
// budget of a kind or group (Target is the kind or group). A budget's own
// override wins over its scope's.
type Override = engine.Override

// ErrNoOverride is returned when clearing an override that is not set.
var ErrNoOverride = engine.ErrNoOverride

// SetOverride stores an override, checked as a declaration is (To, Per and
// Burst). Workers read overrides every WorkerConfig.OverrideRefresh and
// apply them from their next claim: the debt the budget inherited is
// counted in the new limit's intervals (docs/rate-limits.md, "Changing a
// limit").
func (s *Store) SetOverride(ctx context.Context, o Override) error {
	return s.e.SetOverride(ctx, o, time.Now())
}

// ClearOverride removes the override on target: the declared limit
// applies again. It returns ErrNoOverride when none is set.
func (s *Store) ClearOverride(ctx context.Context, target string) error {
	return s.e.ClearOverride(ctx, target)
}

// Overrides returns every override, by target.
func (s *Store) Overrides(ctx context.Context) ([]Override, error) {
	return s.e.ListOverrides(ctx)
}
