package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicequeue/sluice/ratelimit"
)

// Override replaces a declared rate limit at run time, for one budget
// ("Stripe/Account/7") or a whole scope ("Stripe", a group or a kind, or
// "@queue/sms"): a premium tenant gets twice the rate without a deploy.
type Override struct {
	// Target is the budget key or the scope it applies to. A budget's own
	// override wins over its scope's.
	Target    string
	To        int
	Per       time.Duration
	Burst     int
	UpdatedAt time.Time
}

// Spec applies the override to a declared limit.
func (o Override) Spec(declared ratelimit.Spec) ratelimit.Spec {
	p, burst, err := ratelimit.NewParams(o.To, o.Per, o.Burst)
	if err != nil {
		return declared // checked when it was set
	}
	declared.To, declared.Per, declared.Burst, declared.Params = o.To, o.Per, burst, p
	return declared
}

// Check checks the override as SetOverride does, without storing it, and
// returns the burst it would store (0 is 1).
func (o Override) Check() (int, error) {
	if err := CheckKey("target", o.Target); err != nil {
		return 0, fmt.Errorf("limit override: %w; it must name a budget or a scope", err)
	}
	_, burst, err := ratelimit.NewParams(o.To, o.Per, o.Burst)
	if err != nil {
		return 0, fmt.Errorf("limit override %s: %w", o.Target, err)
	}
	if o.Per%time.Microsecond != 0 {
		// It is stored in microseconds: cut, it would be a looser limit
		// than the one just checked.
		return 0, fmt.Errorf("limit override %s: %w: Per is %s; an override's Per is a whole number of microseconds", o.Target, ratelimit.ErrInvalid, o.Per)
	}
	return burst, nil
}

// SetOverride stores an override, checked as a declaration is. Workers
// read it within their refresh interval; the change follows the rules of a
// changed limit (the inherited debt counted in the new limit's intervals;
// ratelimit.Params.CarryDebt).
func (s *Store) SetOverride(ctx context.Context, o Override, now time.Time) error {
	burst, err := o.Check()
	if err != nil {
		return err
	}
	q, args := s.q.SaveOverride(OverrideRow{Target: o.Target, To: o.To, PerUS: o.Per.Microseconds(), Burst: burst, UpdatedAt: Micros(now)})
	if _, err := s.execAlone(ctx, q, args); err != nil {
		return s.wrap(fmt.Errorf("limit override %s: %w", o.Target, err))
	}
	return nil
}

// ErrNoOverride is returned when clearing an override that is not set.
var ErrNoOverride = errors.New("no override is set")

// ClearOverride removes an override: the declared limit applies again. A
// target no override can have (see CheckKey) is refused before the
// database sees it: on MySQL, which ignores trailing spaces when it
// compares, "Stripe " would clear "Stripe"'s override.
func (s *Store) ClearOverride(ctx context.Context, target string) error {
	if err := CheckKey("target", target); err != nil {
		return fmt.Errorf("clear limit override: %w; it must name a budget or a scope", err)
	}
	q, args := s.q.DeleteOverride(target)
	res, err := s.execAlone(ctx, q, args)
	if err != nil {
		return s.wrap(fmt.Errorf("clear limit override %s: %w", target, err))
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("clear limit override %s: %w", target, ErrNoOverride)
	}
	return nil
}

// ListOverrides returns every override, by target.
func (s *Store) ListOverrides(ctx context.Context) ([]Override, error) {
	return s.ListOverridesIn(ctx, nil)
}

// ListOverridesIn is ListOverrides through ex (a caller's transaction,
// which on SQLite holds the one connection); nil reads through the
// store's pool.
func (s *Store) ListOverridesIn(ctx context.Context, ex Executor) ([]Override, error) {
	if ex == nil {
		ex = s.db
	}
	rows, err := ex.Query(ctx, s.q.ListOverrides())
	if err != nil {
		return nil, s.wrap(fmt.Errorf("list limit overrides: %w", err))
	}
	defer rows.Close()
	var out []Override
	for rows.Next() {
		var o Override
		var per, updated int64
		if err := rows.Scan(&o.Target, &o.To, &per, &o.Burst, &updated); err != nil {
			return nil, err
		}
		o.Per, o.UpdatedAt = time.Duration(per)*time.Microsecond, FromMicros(updated)
		out = append(out, o)
	}
	return out, rows.Err()
}
