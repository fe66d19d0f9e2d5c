package cli

import (
	"fmt"
	"github.com/sluicequeue/sluice/internal/human"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/ratelimit"
)

// describeLimit says the limit a budget was last charged under as it was
// declared ("100 per 1m, burst 10"): the override or the app's declaration
// whose interval and burst it carries, else the same limit written as a
// whole number per second, minute, hour or day (what a binary that does
// not know the app's kinds can say), else its interval.
func (e *Env) describeLimit(b engine.BudgetInfo, overrides []engine.Override) string {
	switch {
	case b.IntervalNS == 0:
		return "-"
	case b.Params().Paused:
		return "paused (To: 0)"
	}
	scope := ratelimit.ScopeOf(b.Name)
	for _, o := range overrides {
		if o.Target != b.Name && o.Target != scope {
			continue
		}
		if p, burst, err := ratelimit.NewParams(o.To, o.Per, o.Burst); err == nil && p.Interval == b.IntervalNS && burst == b.Burst {
			return limitText(o.To, o.Per, burst)
		}
	}
	for _, spec := range e.App.Registry.DeclaredLimits(b.Name) {
		if spec.Params.Interval == b.IntervalNS && spec.Burst == b.Burst {
			return limitText(spec.To, spec.Per, spec.Burst)
		}
	}
	for _, per := range []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour} {
		n := (per.Nanoseconds() + b.IntervalNS/2) / b.IntervalNS
		if n < 1 {
			break
		}
		// NewParams rounds the interval up: per/n must come back exactly.
		if p, _, err := ratelimit.NewParams(int(n)+b.Burst-1, per, b.Burst); err == nil && p.Interval == b.IntervalNS {
			return limitText(int(n)+b.Burst-1, per, b.Burst)
		}
	}
	return fmt.Sprintf("1 per %s, burst %d", time.Duration(b.IntervalNS), b.Burst)
}

// limitText prints a limit as declared: "100 per 1m, burst 10".
func limitText(to int, per time.Duration, burst int) string {
	return fmt.Sprintf("%d per %s, burst %d", to, human.Duration(per), burst)
}
