package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/ratelimit"
)

// ErrUnknownKind is returned when enqueueing args whose kind the registry
// does not know.
var ErrUnknownKind = errors.New("kind not registered")

// Registry holds the kinds a process knows: their handlers, defaults and
// limits. Register every kind before starting workers; a registry is safe
// for concurrent use.
type Registry struct {
	mu     sync.RWMutex
	kinds  map[string]*kind
	queues map[string][]engine.QueueLimit
	// limited is set once any kind declares a rate limit; until then
	// claims run the plain queue's statements.
	limited bool
	// fair is set once any kind declares a fairness key; until then claims
	// take no fair stream.
	fair bool
}

// kind is one registered kind, with its type erased.
type kind struct {
	name     string
	argsType reflect.Type
	cfg      kindConfig
	rules    []rateRule
	byScope  map[string]ratelimit.Spec
	conc     *concRule
	// decode decodes the kind's args; strict refuses a field the args
	// type does not have (a config file's typo), which a job's stored
	// args, perhaps written by a newer version of the app, may carry.
	decode func(b []byte, strict bool) (any, error)
	// work runs the handler with the job's args (and its collected calls,
	// decoded); nil for a kind declared without one.
	work func(ctx context.Context, j *engine.Job, md map[string]string, args any, calls []any) error
	// readsCalls is set when the handler reads every call the job
	// collected (RegisterCalls); a handler registered with Register or
	// RegisterHandler reads only j.Args, and is never given a job that
	// holds more calls (see Worker.decode).
	readsCalls bool
	// coalesce is the kind's coalescing rule; nil without one.
	coalesce *coalesceRule
	// fair is the kind's fairness key and weight; nil without one.
	fair *fairRule
}

// coalesceRule is a compiled coalescing rule with its type erased.
type coalesceRule struct {
	spec coalesce.Spec
	key  func(args any) (string, error)
}

// sharesWith says why kind k, whose rule c is, cannot share its coalesce
// scope (its Group) with the registered kind other, or returns nil when it
// can. A call joins the pending job that holds its key, whatever its kind,
// and applies its own rule to it, so the kinds must declare the same rule.
// Only Discard keys are shared: a Replace or Collect call gives the job its
// args, and another kind's handler would decode them as its own args or
// drop them (each kind has its own args type).
func (c *coalesceRule) sharesWith(k, other *kind) error {
	mine, theirs := c.spec, other.coalesce.spec
	where := fmt.Sprintf("Coalesce Group %q is used by kind %s", mine.Scope, other.name)
	if mine.Scope == k.name || mine.Scope == other.name {
		// A kind without a Group scopes its keys by its name.
		where = fmt.Sprintf("Coalesce keys of scope %q are used by kind %s", mine.Scope, other.name)
	}
	if mine.OnConflict != coalesce.Discard || theirs.OnConflict != coalesce.Discard {
		return fmt.Errorf("%s, with OnConflict: %s (args %s); %s declares OnConflict: %s (args %s). "+
			"Only Discard keys are shared between kinds: a Replace or Collect call gives its args to the pending job of its key, "+
			"whose handler, another kind's, would decode them as its own or drop them; give each kind its own Group",
			where, theirs.OnConflict, other.argsType, k.name, mine.OnConflict, k.argsType)
	}
	var diffs []string
	if mine.Debounce != theirs.Debounce {
		diffs = append(diffs, fmt.Sprintf("Debounce %s, not %s", mine.Debounce, theirs.Debounce))
	}
	if mine.MaxDelay != theirs.MaxDelay {
		diffs = append(diffs, fmt.Sprintf("MaxDelay %s, not %s", mine.MaxDelay, theirs.MaxDelay))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%s with another rule: %s declares %s. A call joins the pending job of any kind of its Group "+
			"and delays it by its own rule: give the kinds of one Group the same Debounce and MaxDelay, or each rule its own Group",
			where, k.name, strings.Join(diffs, " and "))
	}
	return nil
}

// rateRule is a compiled rate limit with its type erased.
type rateRule struct {
	spec ratelimit.Spec
	key  func(args any) (string, error)
	cost func(args any) (int, error)
}

// concRule is a compiled concurrency limit with its type erased.
type concRule struct {
	spec concurrency.Spec
	key  func(args any) (string, error)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{kinds: map[string]*kind{}, queues: map[string][]engine.QueueLimit{}}
}

// LimitQueue declares a rate limit on a whole queue: every job claimed from
// it, whatever its kind, draws on the queue's one budget ("@queue/NAME"),
// combined with its kind's own limits. A queue takes one limit.
func (r *Registry) LimitQueue(queue string, l ratelimit.QueueLimit) error {
	if err := engine.CheckQueue("queue", queue); err != nil {
		return fmt.Errorf("jobs: limit queue: %w", err)
	}
	if err := engine.CheckKey("queue budget key", engine.QueueScope+"/"+queue); err != nil {
		return fmt.Errorf("jobs: limit queue: %w", err)
	}
	spec, err := l.Compile(queue)
	if err != nil {
		return fmt.Errorf("jobs: limit queue %s: %w", queue, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queues[queue]) > 0 {
		return fmt.Errorf("jobs: limit queue %s: the queue is already limited", queue)
	}
	r.queues[queue] = []engine.QueueLimit{{Key: engine.QueueScope + "/" + queue, Spec: spec}}
	r.limited = true
	return nil
}

// queueLimits returns the limits declared on a queue.
func (r *Registry) queueLimits(queue string) []engine.QueueLimit {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.queues[queue]
}

// Register adds a handler function for the kind of T.
func Register[T Args](r *Registry, work func(ctx context.Context, job *Job[T]) error, opts ...RegisterOption) error {
	if work == nil {
		return fmt.Errorf("jobs: register %s: the handler is nil", kindName[T]())
	}
	return register[T](r, HandlerFunc[T](work), nil, opts)
}

// RegisterHandler adds a Handler for the kind of T.
func RegisterHandler[T Args](r *Registry, h Handler[T], opts ...RegisterOption) error {
	if h == nil {
		return fmt.Errorf("jobs: register %s: the handler is nil", kindName[T]())
	}
	return register[T](r, h, nil, opts)
}

// RegisterCalls adds a handler for a kind that coalesces with OnConflict:
// Collect: it receives every call the job collected, oldest first, and a
// retry runs all of them again.
func RegisterCalls[T Args](r *Registry, work CallsHandler[T], opts ...RegisterOption) error {
	if work == nil {
		return fmt.Errorf("jobs: register %s: the handler is nil", kindName[T]())
	}
	return register[T](r, nil, work, opts)
}

// Declare adds the kind of T without a handler: for processes that enqueue
// jobs other processes work. Enqueue needs the kind's options (its queue,
// its limits' keys) even where nothing runs it.
func Declare[T Args](r *Registry, opts ...RegisterOption) error {
	return register[T](r, nil, nil, opts)
}

func kindName[T Args]() (name string) {
	defer func() {
		if recover() != nil {
			name = ""
		}
	}()
	var zero T
	return zero.Kind()
}

func register[T Args](r *Registry, h Handler[T], calls CallsHandler[T], opts []RegisterOption) error {
	name := kindName[T]()
	var zero T
	if name == "" {
		return fmt.Errorf("jobs: register %T: Kind() returned an empty name or panicked on the zero value", zero)
	}
	if err := engine.CheckKey("kind", name); err != nil {
		return fmt.Errorf("jobs: register %T: %w", zero, err)
	}
	fail := func(err error) error { return fmt.Errorf("jobs: register %s: %w", name, err) }
	cfg := kindConfig{queue: DefaultQueue, maxAttempts: DefaultMaxAttempts}
	for _, o := range opts {
		if o == nil {
			return fail(errors.New("nil option"))
		}
		if err := o.applyRegister(&cfg); err != nil {
			return fail(err)
		}
	}
	k := &kind{
		name:     name,
		argsType: reflect.TypeOf(zero),
		cfg:      cfg,
		byScope:  map[string]ratelimit.Spec{},
		decode: func(b []byte, strict bool) (v any, err error) {
			defer recoverInto(&err) // an UnmarshalJSON of the kind's own
			var t T
			if !strict {
				err = json.Unmarshal(b, &t)
				return t, err
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err = dec.Decode(&t); err == nil && dec.More() {
				err = errors.New("more than one JSON value")
			}
			return t, err
		},
	}
	for i, decl := range cfg.rateLimits {
		rule, err := compileRate[T](name, decl)
		if err != nil {
			return fail(fmt.Errorf("RateLimit %d: %w", i+1, err))
		}
		if rule == nil {
			continue // Key: nil turns the limit off
		}
		if _, dup := k.byScope[rule.spec.Scope]; dup {
			return fail(fmt.Errorf("two rate limits share the budget scope %q; give each its own Group", rule.spec.Scope))
		}
		k.byScope[rule.spec.Scope] = rule.spec
		k.rules = append(k.rules, *rule)
	}
	if len(cfg.concurrency) > 1 {
		return fail(errors.New("ConcurrencyLimit is declared more than once; a kind has one"))
	}
	for _, decl := range cfg.concurrency {
		rule, err := compileConc[T](name, decl)
		if err != nil {
			return fail(fmt.Errorf("ConcurrencyLimit: %w", err))
		}
		if rule != nil && rule.spec.Discard && len(k.rules) > 0 {
			return fail(errors.New("ConcurrencyLimit with OnConflict: Discard cannot be combined with a RateLimit: " +
				"a job that comes back from waiting on its rate to a taken slot would be discarded"))
		}
		k.conc = rule
	}
	if len(cfg.coalesce) > 1 {
		return fail(errors.New("Coalesce is declared more than once; a kind has one rule"))
	}
	for _, decl := range cfg.coalesce {
		rule, err := compileCoalesce[T](name, decl)
		if err != nil {
			return fail(fmt.Errorf("Coalesce: %w", err))
		}
		k.coalesce = rule
	}
	fair, err := compileFair[T](cfg)
	if err != nil {
		return fail(err)
	}
	k.fair = fair
	collects := k.coalesce != nil && k.coalesce.spec.OnConflict == coalesce.Collect
	switch {
	case collects && h != nil:
		return fail(errors.New("Coalesce with OnConflict: Collect needs a handler for every call: register it with jobs.RegisterCalls"))
	case !collects && calls != nil:
		return fail(errors.New("RegisterCalls is for kinds that Coalesce with OnConflict: Collect"))
	}
	k.readsCalls = calls != nil
	if h != nil || calls != nil {
		k.work = func(ctx context.Context, j *engine.Job, md map[string]string, args any, more []any) error {
			job := &Job[T]{
				ID: j.ID, Args: args.(T), Kind: j.Kind, Queue: j.Queue, Priority: j.Priority,
				Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, CreatedAt: j.CreatedAt,
				Calls: []T{args.(T)}, Metadata: md,
			}
			for _, c := range more {
				job.Calls = append(job.Calls, c.(T))
			}
			if calls != nil {
				return calls(ctx, job, job.Calls)
			}
			return h.Work(ctx, job)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.kinds[name]; dup {
		return fail(errors.New("the kind is already registered"))
	}
	if k.coalesce != nil {
		// The kinds already registered in its coalesce scope (a Group, or
		// a kind's own name), in name order: the error names the first.
		for _, other := range slices.Sorted(maps.Keys(r.kinds)) {
			o := r.kinds[other]
			if o.coalesce == nil || o.coalesce.spec.Scope != k.coalesce.spec.Scope {
				continue
			}
			if err := k.coalesce.sharesWith(k, o); err != nil {
				return fail(err)
			}
		}
	}
	r.kinds[name] = k
	r.limited = r.limited || len(k.rules) > 0
	r.fair = r.fair || k.fair != nil
	return nil
}

// hasFair reports whether any kind declares a fairness key.
func (r *Registry) hasFair() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.fair
}

func compileRate[T Args](name string, decl any) (*rateRule, error) {
	l, ok := decl.(ratelimit.Limit[T])
	if !ok {
		var zero T
		return nil, fmt.Errorf("declared as %T, but the kind's args are %T", decl, zero)
	}
	r, err := ratelimit.Compile(name, l)
	if err != nil || r == nil {
		return nil, err
	}
	return &rateRule{
		spec: r.Spec,
		key:  func(a any) (string, error) { return r.BudgetKey(a.(T)) },
		cost: func(a any) (int, error) { return r.Cost(a.(T)) },
	}, nil
}

func compileConc[T Args](name string, decl any) (*concRule, error) {
	l, ok := decl.(concurrency.Limit[T])
	if !ok {
		var zero T
		return nil, fmt.Errorf("declared as %T, but the kind's args are %T", decl, zero)
	}
	r, err := concurrency.Compile(name, l)
	if err != nil || r == nil {
		return nil, err
	}
	return &concRule{spec: r.Spec, key: func(a any) (string, error) { return r.SlotKey(a.(T)) }}, nil
}

func compileCoalesce[T Args](name string, decl any) (*coalesceRule, error) {
	rule, ok := decl.(coalesce.Rule[T])
	if !ok {
		var zero T
		return nil, fmt.Errorf("declared as %T, but the kind's args are %T", decl, zero)
	}
	c, err := coalesce.Compile(name, rule)
	if err != nil || c == nil {
		return nil, err
	}
	return &coalesceRule{spec: c.Spec, key: func(a any) (string, error) { return c.CoalesceKey(a.(T)) }}, nil
}

func (r *Registry) lookup(name string) *kind {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.kinds[name]
}

// ArgsFromJSON decodes args for a kind by name, as a config file gives
// them: for recurring tasks declared outside code. It is strict, as a
// hand-written file deserves: a field the kind's args type does not have
// (a typo, "perod" for "period") is an error, not a value dropped.
func (r *Registry) ArgsFromJSON(kindName string, raw []byte) (Args, error) {
	k := r.lookup(kindName)
	if k == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKind, kindName)
	}
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	v, err := k.decode(raw, true)
	if err != nil {
		return nil, fmt.Errorf("decode args of %s: %w", kindName, err)
	}
	return v.(Args), nil
}

// Kinds lists the registered kinds in name order; a nil registry has
// none.
func (r *Registry) Kinds() []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.kinds))
	for n := range r.kinds {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// RateSpec returns the limit the kind declares for the scope of a budget
// key: what claims decide with.
func (r *Registry) RateSpec(kindName, budgetKey string) (ratelimit.Spec, bool) {
	k := r.lookup(kindName)
	if k == nil {
		return ratelimit.Spec{}, false
	}
	s, ok := k.byScope[ratelimit.ScopeOf(budgetKey)]
	return s, ok
}

// scopeSpec returns the limit declared for a budget key's scope by any
// kind (its own scope or a group it names) or, for "@queue/NAME", on the
// queue.
func (r *Registry) scopeSpec(budgetKey string) (ratelimit.Spec, bool) {
	scope := ratelimit.ScopeOf(budgetKey)
	if scope == engine.QueueScope {
		for _, l := range r.queueLimits(strings.TrimPrefix(budgetKey, engine.QueueScope+"/")) {
			if l.Key == budgetKey {
				return l.Spec, true
			}
		}
		return ratelimit.Spec{}, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, name := range slices.Sorted(maps.Keys(r.kinds)) {
		if s, ok := r.kinds[name].byScope[scope]; ok {
			return s, true
		}
	}
	return ratelimit.Spec{}, false
}

// limitTargets returns what the registry's rate limits cover, sorted:
// the scope of each limit a kind declares, and the budget key of each
// limited queue ("@queue/NAME").
func (r *Registry) limitTargets() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []string
	for _, k := range r.kinds {
		for scope := range k.byScope {
			out = append(out, scope)
		}
	}
	for _, ls := range r.queues {
		for _, l := range ls {
			out = append(out, l.Key)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// concScopes returns the concurrency limits the registry's kinds declare,
// by scope (a Group, or a kind) and then by kind.
func (r *Registry) concScopes() map[string]map[string]concurrency.Spec {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := map[string]map[string]concurrency.Spec{}
	for name, k := range r.kinds {
		if k.conc == nil {
			continue
		}
		if out[k.conc.spec.Scope] == nil {
			out[k.conc.spec.Scope] = map[string]concurrency.Spec{}
		}
		out[k.conc.spec.Scope][name] = k.conc.spec
	}
	return out
}

// limits returns the registry as the claim's Limits, or nil when no kind
// declares a limit, so that claims run exactly the plain statements.
func (r *Registry) limits() engine.Limits {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if !r.limited {
		return nil
	}
	return registryLimits{r}
}

// registryLimits are a registry's declared limits as engine.Limits, whose
// QueueLimits names an engine type the registry does not export.
type registryLimits struct{ *Registry }

// QueueLimits implements engine.Limits.
func (l registryLimits) QueueLimits(queue string) []engine.QueueLimit { return l.queueLimits(queue) }

// concLimit computes a job's concurrency key at enqueue; nil without a
// limit.
func (k *kind) concLimit(args any) (*engine.Conc, error) {
	if k.conc == nil {
		return nil, nil
	}
	key, err := k.conc.key(args)
	if err != nil {
		return nil, err
	}
	s := k.conc.spec
	return &engine.Conc{Key: key, To: s.To, Duration: s.Duration, Discard: s.Discard}, nil
}

// coalesceKey computes a job's coalescing key at enqueue; nil without a
// rule.
func (k *kind) coalesceKey(args any) (*engine.Coalesce, error) {
	if k.coalesce == nil {
		return nil, nil
	}
	key, err := k.coalesce.key(args)
	if err != nil {
		return nil, err
	}
	return &engine.Coalesce{Key: key, Rule: k.coalesce.spec}, nil
}

// rateKeys computes a job's budget keys and costs at enqueue. A cost above
// its limit's declared burst is refused (a *ratelimit.CostError) unless
// inForce, when given, returns for the budget a limit (an override) under
// which the cost can be admitted.
func (k *kind) rateKeys(args any, inForce func(key string) (ratelimit.Spec, bool)) ([]engine.RateKey, error) {
	if len(k.rules) == 0 {
		return nil, nil
	}
	out := make([]engine.RateKey, 0, len(k.rules))
	for _, rule := range k.rules {
		key, err := rule.key(args)
		if err != nil {
			return nil, err
		}
		cost, err := rule.cost(args)
		var ce *ratelimit.CostError
		if errors.As(err, &ce) && inForce != nil {
			if spec, ok := inForce(key); ok && spec.Burst != ce.Burst {
				if !spec.Params.Paused && !spec.Shadow && ce.Cost > spec.Burst {
					return nil, fmt.Errorf("rate limit %s: cost %d is above the burst in force on %s (%d, set by an override), so the job could never be admitted", ce.Scope, ce.Cost, key, spec.Burst)
				}
				cost, err = ce.Cost, nil
			}
		}
		if err != nil {
			return nil, err
		}
		out = append(out, engine.RateKey{Key: key, Cost: cost})
	}
	return out, nil
}
