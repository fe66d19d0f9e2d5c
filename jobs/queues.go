package jobs

import (
	"slices"
	"sort"
	"strings"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/ratelimit"
)

// Queues lists, in name order, the queues that the kinds registered with
// a handler go to by default (their Queue option, else DefaultQueue): the
// queues a worker over this registry has work in. Kinds declared without a
// handler (Declare) are left out: other programs work them. A nil
// registry has none.
func (r *Registry) Queues() []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := map[string]bool{}
	for _, k := range r.kinds {
		if k.work != nil {
			seen[k.cfg.queue] = true
		}
	}
	out := make([]string, 0, len(seen))
	for q := range seen {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

// workerQueues is what a worker claims when WorkerConfig.Queues is empty:
// the queues of Queues, then DefaultQueue if it is not among them.
func (r *Registry) workerQueues() []string {
	qs := r.Queues()
	if !slices.Contains(qs, DefaultQueue) {
		qs = append(qs, DefaultQueue)
	}
	return qs
}

// KindsOf lists, in name order, the registered kinds (with a handler or
// without) whose jobs go to queue by default.
func (r *Registry) KindsOf(queue string) []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []string
	for name, k := range r.kinds {
		if k.cfg.queue == queue {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// DeclaredLimits returns the rate limits declared for a budget key's
// scope: those of every kind that limits that scope (a group's kinds may
// declare different ones) or, for a queue's budget, the queue's limit.
func (r *Registry) DeclaredLimits(budgetKey string) []ratelimit.Spec {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []ratelimit.Spec
	scope := ratelimit.ScopeOf(budgetKey)
	if scope == engine.QueueScope {
		for _, l := range r.queues[strings.TrimPrefix(budgetKey, engine.QueueScope+"/")] {
			out = append(out, l.Spec)
		}
		return out
	}
	for _, name := range sortedKeys(r.kinds) {
		if s, ok := r.kinds[name].byScope[scope]; ok {
			out = append(out, s)
		}
	}
	return out
}
