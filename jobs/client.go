package jobs

import (
	"bytes"
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/keys"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// DefaultMaxArgsBytes is the largest encoded args an enqueue accepts.
const DefaultMaxArgsBytes = 1 << 20

// ErrArgsTooLarge is wrapped by the error for args over the size cap, or
// over what the database server carries in one statement.
var ErrArgsTooLarge = errors.New("args too large")

// ErrInvalidArgs is wrapped by the error for args that would not reach the
// handler as given: a string that is not valid UTF-8, which JSON would
// turn into U+FFFD so that the handler got other args than were enqueued;
// or args that nest objects and arrays deeper than encoding/json decodes
// (10,000 levels), which no worker could decode.
var ErrInvalidArgs = errors.New("invalid args")

// ClientConfig configures a Client. The zero value is usable.
type ClientConfig struct {
	// Clock stamps enqueues and resolves delays. Defaults to the system
	// clock. With the system clock, the concurrency slots an enqueue takes
	// are stamped on the database's clock; with another, on Clock.
	Clock clock.Clock
	// MaxArgsBytes caps the encoded size of one job's args. Defaults to
	// DefaultMaxArgsBytes (1 MiB) when 0; a negative one is refused (see
	// NewClient). Whatever it says, args over what the
	// database server carries in one statement (on MySQL, about half its
	// max_allowed_packet) are refused.
	MaxArgsBytes int
	// OnEnqueue, if set, is called for each job an enqueue wrote or
	// joined, after it was written (for EnqueueTx, before the caller's
	// commit; for a dispatcher's recurring task, after the commit of the
	// tick's transaction). One that panics does not keep the other jobs from their
	// calls, and the enqueue returns its jobs with an error wrapping
	// ErrOnEnqueuePanicked, which names the job's kind: the jobs were
	// written (with EnqueueTx, they go with your transaction).
	OnEnqueue func(EnqueueEvent)
	// Middleware wraps every enqueue, outermost first: it may read the
	// context and set the jobs' metadata (see EnqueueMiddleware). Defaults
	// to none.
	Middleware []EnqueueMiddleware
}

// EnqueueEvent describes one enqueued job.
type EnqueueEvent struct {
	// Kind is the job's kind.
	Kind string
	// Queue is the queue it went to.
	Queue string
	Enqueued
}

// Client enqueues jobs. It is safe for concurrent use.
type Client struct {
	pub       *store.Store
	store     *engine.Store
	reg       *Registry
	clock     clock.Clock
	maxArgs   int
	onEnqueue func(EnqueueEvent)
	// middleware wraps enqueues; cfgErr refuses every enqueue of a client
	// whose config is wrong.
	middleware []EnqueueMiddleware
	cfgErr     error
}

// NewClient returns a client that enqueues into s the kinds reg knows. A
// config it cannot use (a nil entry in cfg.Middleware, a negative
// MaxArgsBytes) makes every enqueue, and Check, fail with an error that
// names the field.
func NewClient(s *store.Store, reg *Registry, cfg ClientConfig) *Client {
	var errs []error
	if err := checkMiddleware("ClientConfig.Middleware", cfg.Middleware); err != nil {
		errs = append(errs, err)
	}
	if cfg.MaxArgsBytes < 0 {
		errs = append(errs, fmt.Errorf("ClientConfig.MaxArgsBytes is %d; it must be positive, or 0 for the default (%d)", cfg.MaxArgsBytes, DefaultMaxArgsBytes))
	}
	if cfg.MaxArgsBytes <= 0 {
		cfg.MaxArgsBytes = DefaultMaxArgsBytes
	}
	c := &Client{pub: s, store: engine.From(s), reg: reg, clock: clock.OrSystem(cfg.Clock), maxArgs: cfg.MaxArgsBytes, onEnqueue: cfg.OnEnqueue,
		middleware: cfg.Middleware}
	if err := errors.Join(errs...); err != nil {
		c.cfgErr = fmt.Errorf("jobs: NewClient: %w", err)
	}
	return c
}

// Store returns the client's store.
func (c *Client) Store() *store.Store { return c.pub }

// Check reports what an enqueue of it would refuse before writing (an
// unknown kind, args of another type, a bad option), without writing: for
// callers that declare jobs ahead of enqueuing them, such as a
// dispatcher's recurring tasks.
func (c *Client) Check(it Item) error {
	if c.cfgErr != nil {
		return c.cfgErr
	}
	_, err := c.newJob(it, c.clock.Now(), nil)
	return err
}

// Enqueued is what became of one enqueued job: its id (a new job's, or the
// pending job's it joined), whether it joined one, and its state.
type Enqueued = engine.Enqueued

// Item is one job of an EnqueueMany.
type Item struct {
	// Args are the job's args; their Kind picks the registered kind.
	Args Args
	// Options apply to this job only (queue, priority, run time, …);
	// default none.
	Options []EnqueueOption
}

// Enqueue adds one job and says what became of it: its id, and, for a
// kind that coalesces, whether it joined a pending job.
func (c *Client) Enqueue(ctx context.Context, args Args, opts ...EnqueueOption) (Enqueued, error) {
	return first(c.enqueue(ctx, nil, []Item{{Args: args, Options: opts}}))
}

// first is an enqueue of one job: its result, with the error. An error
// comes with the job only when it was written all the same
// (ErrOnEnqueuePanicked).
func first(res []Enqueued, err error) (Enqueued, error) {
	if len(res) == 0 {
		return Enqueued{}, err
	}
	return res[0], err
}

// EnqueueTx adds one job inside the caller's transaction, so that it
// commits or rolls back with the caller's own writes: a pgx.Tx on
// PostgreSQL, a *sql.Tx on MySQL and SQLite.
func (c *Client) EnqueueTx(ctx context.Context, tx any, args Args, opts ...EnqueueOption) (Enqueued, error) {
	ex, err := c.wrapTx(tx)
	if err != nil {
		return Enqueued{}, err
	}
	return first(c.enqueue(ctx, ex, []Item{{Args: args, Options: opts}}))
}

// EnqueueMany adds jobs in as few statements as the database allows (one
// multi-row insert per batch) and says what became of each, in order.
// Every item is checked first: one bad item writes none of them, and the
// error names its index.
func (c *Client) EnqueueMany(ctx context.Context, items []Item) ([]Enqueued, error) {
	return c.enqueue(ctx, nil, items)
}

// EnqueueManyTx is EnqueueMany inside the caller's transaction. It is all
// or nothing there too: a batch the database refuses (a trigger, a
// deadlock) leaves none of its jobs in the transaction. One that takes
// several statements (more jobs than one insert carries, or coalescing,
// concurrency-limited or fair jobs) runs under a savepoint it rolls back
// to, so that the transaction goes on after the refusal, on PostgreSQL
// too; a single insert refused there aborts it, as any failed statement
// does.
func (c *Client) EnqueueManyTx(ctx context.Context, tx any, items []Item) ([]Enqueued, error) {
	ex, err := c.wrapTx(tx)
	if err != nil {
		return nil, err
	}
	return c.enqueue(ctx, ex, items)
}

// EnqueueIn is EnqueueMany through a transaction of the store's own (a
// engine.Tx), for sluice's components that enqueue alongside other writes
// and commit them together; callers with their own pgx.Tx or *sql.Tx use
// EnqueueManyTx. The enqueue's outcome is the transaction's, which the
// caller settles by calling settle once: with nil after the commit, or
// with the error that failed the transaction (its commit's included).
// settle calls the functions middleware registered with OnEnqueueDone,
// with that error, and, after a commit only, ClientConfig.OnEnqueue for
// each job, returning the first panic of it as an error wrapping
// ErrOnEnqueuePanicked (the jobs are committed). So OnEnqueue reports only
// committed jobs, once. An EnqueueIn that fails has settled its outcome
// already, and returns a nil settle.
func (c *Client) EnqueueIn(ctx context.Context, ex engine.Executor, items []Item) (res []Enqueued, settle func(error) error, err error) {
	if ex == nil {
		return nil, nil, errors.New("jobs: EnqueueIn: the executor is nil")
	}
	return c.write(ctx, ex, items)
}

func (c *Client) wrapTx(tx any) (engine.Executor, error) {
	ex, err := c.store.DB().WrapTx(tx)
	if err != nil {
		return nil, fmt.Errorf("jobs: EnqueueTx: %w", err)
	}
	return ex, nil
}

// enqueue writes items through ex (nil: a transaction or statement of
// the client's own), and settles the outcome at once: the write committed
// then, or joined the caller's transaction.
func (c *Client) enqueue(ctx context.Context, ex engine.Executor, items []Item) ([]Enqueued, error) {
	res, settle, err := c.write(ctx, ex, items)
	if err != nil {
		return nil, err
	}
	if err := settle(nil); err != nil {
		return res, err
	}
	return res, nil
}

// write checks and writes items through ex (nil: a transaction or
// statement of the client's own), through the client's middleware. It
// returns settle, to be called once the write's fate is known (see
// EnqueueIn): what the middleware registered with OnEnqueueDone is told
// it, and, when it was kept, this process's workers wake for the queues
// that gained ready jobs (without ex) and OnEnqueue reports each job. A
// write that fails settles its outcome itself, and returns a nil settle.
func (c *Client) write(ctx context.Context, ex engine.Executor, items []Item) ([]Enqueued, func(error) error, error) {
	if c.cfgErr != nil {
		return nil, nil, c.cfgErr
	}
	if len(items) == 0 {
		return nil, func(error) error { return nil }, nil
	}
	now := c.clock.Now()
	rows := make([]engine.NewJob, len(items))
	var inForce func(kind, key string) (ratelimit.Spec, bool)
	for i, it := range items {
		row, err := c.newJob(it, now, inForce)
		var ce *ratelimit.CostError
		if errors.As(err, &ce) && inForce == nil {
			// A cost above its declared burst: an override may have
			// raised the burst. Read them, once, only then, in the
			// caller's transaction if there is one (on SQLite it holds
			// the only connection).
			view := &limitsView{reg: c.reg}
			if lerr := view.loadIn(ctx, c.store, ex); lerr != nil {
				return nil, nil, fmt.Errorf("jobs: enqueue: %w", lerr)
			}
			inForce = view.RateSpec
			row, err = c.newJob(it, now, inForce)
		}
		if err != nil {
			if len(items) > 1 {
				return nil, nil, fmt.Errorf("jobs: enqueue item %d: %w", i, err)
			}
			return nil, nil, fmt.Errorf("jobs: enqueue: %w", err)
		}
		rows[i] = row
	}
	sc := engine.HostTime(func() time.Time { return now })
	if clock.IsSystem(c.clock) {
		sc = engine.DatabaseTime(func() time.Time { return now })
	}
	var res []Enqueued
	var es *enqueueState
	var err error
	if len(c.middleware) == 0 {
		res, err = c.store.Enqueue(ctx, ex, sc, rows)
		if err != nil {
			err = fmt.Errorf("jobs: %w", err)
		}
	} else {
		res, es, err = c.enqueueThrough(ctx, ex, sc, rows)
	}
	if err != nil {
		return nil, nil, err
	}
	settled := false
	settle := func(err error) error {
		if settled {
			return nil
		}
		settled = true
		if es != nil {
			es.finish(ctx, err)
		}
		if err != nil {
			return nil
		}
		if ex == nil {
			c.wakeReady(rows, res)
		}
		if c.onEnqueue != nil {
			return c.notify(rows, res)
		}
		return nil
	}
	return res, settle, nil
}

// ErrOnEnqueuePanicked is returned, wrapped, by an enqueue whose
// ClientConfig.OnEnqueue panicked. The hook runs once the jobs are
// written, so they were: the enqueue returns them with the error. Do not
// enqueue them again. With EnqueueTx and EnqueueManyTx they commit or roll
// back with your transaction, as you decide.
var ErrOnEnqueuePanicked = errors.New("OnEnqueue panicked; the jobs were enqueued")

// notify calls OnEnqueue for each job written, each call guarded: one
// that panics does not keep the others from theirs, and the first panic
// is returned as an error naming its job's kind.
func (c *Client) notify(rows []engine.NewJob, res []Enqueued) error {
	var panicked error
	for i, r := range rows {
		func() {
			defer func() {
				if p := recover(); p != nil && panicked == nil {
					panicked = fmt.Errorf("jobs: enqueue: %w: ClientConfig.OnEnqueue panicked for a job of kind %s (id %d): %v", ErrOnEnqueuePanicked, r.Kind, res[i].ID, p)
				}
			}()
			c.onEnqueue(EnqueueEvent{Kind: r.Kind, Queue: r.Queue, Enqueued: res[i]})
		}()
	}
	return panicked
}

// recoverAs turns a panic of the app's code called at enqueue (what names
// it) into *err, as a key function's panic is: the enqueue fails with it
// before anything is written. Deferred directly: recover works only there.
func recoverAs(err *error, what string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s panicked: %v", what, r)
	}
}

// wakeReady wakes this process's workers for the queues that gained ready
// jobs.
func (c *Client) wakeReady(rows []engine.NewJob, res []Enqueued) {
	seen := map[string]bool{}
	for i, r := range rows {
		if res[i].State == engine.StateReady && !seen[r.Queue] {
			seen[r.Queue] = true
			c.store.Wake(r.Queue)
		}
	}
}

// newJob checks one item and computes everything stored with it: encoded
// args, queue, priority, run time and rate-limit keys. The app's code it
// calls (the kind's key, Cost, Fair and FairWeight functions, the args'
// own methods) may panic: the panic fails the item, as an error naming
// the kind and what panicked, before anything is written.
//
// A cost above its limit's declared burst is refused unless inForce (the
// limits with their overrides; nil reads none) admits it.
func (c *Client) newJob(it Item, now time.Time, inForce func(kind, key string) (ratelimit.Spec, bool)) (j engine.NewJob, err error) {
	if it.Args == nil || isNilPointer(it.Args) {
		return engine.NewJob{}, errors.New("args are nil")
	}
	name, err := kindOf(it.Args)
	if err != nil {
		return engine.NewJob{}, err
	}
	// What no closer guard names: the args' own MarshalJSON or
	// MarshalText, say.
	defer func() {
		if r := recover(); r != nil {
			j, err = engine.NewJob{}, fmt.Errorf("%s: the args' own code panicked while the job was prepared: %v", name, r)
		}
	}()
	k := c.reg.lookup(name)
	if k == nil {
		return engine.NewJob{}, fmt.Errorf("%w: %q (register it, or Declare it where another process runs it)", ErrUnknownKind, name)
	}
	if t := reflect.TypeOf(it.Args); t != k.argsType {
		return engine.NewJob{}, fmt.Errorf("kind %s is registered with args %s, not %s", name, k.argsType, t)
	}
	cfg := enqueueConfig{}
	for _, o := range it.Options {
		if o == nil {
			return engine.NewJob{}, fmt.Errorf("%s: nil option", name)
		}
		if err := o.applyEnqueue(&cfg); err != nil {
			return engine.NewJob{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	if cfg.runAtSet && cfg.delaySet {
		return engine.NewJob{}, fmt.Errorf("%s: both Delay and RunAt were given; pass one (RunAt(t.Add(d)) to wait d after t)", name)
	}
	body, err := encodeArgs(it.Args)
	if err != nil {
		return engine.NewJob{}, fmt.Errorf("%s: %w", name, err)
	}
	if len(body) > c.maxArgs {
		return engine.NewJob{}, fmt.Errorf("%s: %w: %d bytes encoded, the cap is %d", name, ErrArgsTooLarge, len(body), c.maxArgs)
	}
	if m := engine.MaxArgsBytes(c.store); m > 0 && len(body) > m {
		return engine.NewJob{}, fmt.Errorf("%s: %w: %d bytes encoded; the %s server carries at most %d bytes of args in one statement (raise its max_allowed_packet)",
			name, ErrArgsTooLarge, len(body), c.store.Dialect().Name(), m)
	}
	var overridden func(key string) (ratelimit.Spec, bool)
	if inForce != nil {
		overridden = func(key string) (ratelimit.Spec, bool) { return inForce(name, key) }
	}
	rateKeys, err := k.rateKeys(it.Args, overridden)
	if err != nil {
		return engine.NewJob{}, fmt.Errorf("%s: %w", name, err)
	}
	for _, rk := range rateKeys {
		if err := engine.CheckKey("rate-limit key", rk.Key); err != nil {
			return engine.NewJob{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	conc, err := k.concLimit(it.Args)
	if err != nil {
		return engine.NewJob{}, fmt.Errorf("%s: %w", name, err)
	}
	if conc != nil {
		if err := engine.CheckKey("concurrency key", conc.Key); err != nil {
			return engine.NewJob{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	co, err := k.coalesceKey(it.Args)
	if err != nil {
		return engine.NewJob{}, fmt.Errorf("%s: %w", name, err)
	}
	if co != nil {
		if err := engine.CheckKey("coalesce key", co.Key); err != nil {
			return engine.NewJob{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	fairKey, fairWeight, err := k.fairKey(it.Args)
	if err != nil {
		return engine.NewJob{}, fmt.Errorf("%s: %w", name, err)
	}
	j = engine.NewJob{
		Kind: name, Queue: k.cfg.queue, Priority: k.cfg.priority, Args: body,
		MaxAttempts: k.cfg.maxAttempts, RateKeys: rateKeys, Conc: conc, Coalesce: co,
		FairKey: fairKey, FairWeight: fairWeight,
	}
	if cfg.queue != "" {
		j.Queue = cfg.queue
	}
	if cfg.priority != nil {
		j.Priority = *cfg.priority
	}
	if cfg.maxAttempts > 0 {
		j.MaxAttempts = cfg.maxAttempts
	}
	switch {
	case !cfg.runAt.IsZero():
		j.RunAt = cfg.runAt
	case cfg.delay > 0:
		j.RunAt = now.Add(cfg.delay)
	}
	// Its entries were checked by WithMetadata, its size is checked with
	// whatever enqueue middleware adds, before anything is written.
	j.Metadata = cfg.metadata
	if j.RunAt.After(engine.MaxRunAt) {
		return engine.NewJob{}, fmt.Errorf("%s: the run time %s is after %s; schedule it earlier", name, j.RunAt.UTC().Format(time.RFC3339), engine.MaxRunAt.Format(time.RFC3339))
	}
	if co != nil && co.Rule.Debounce > 0 && now.Add(co.Rule.Debounce).After(engine.MaxRunAt) {
		// The call would move its job (a new one or the pending one it
		// joins) to a debounce after now.
		return engine.NewJob{}, fmt.Errorf("%s: its debounce of %s would run the job at %s, after %s", name, co.Rule.Debounce, now.Add(co.Rule.Debounce).UTC().Format(time.RFC3339), engine.MaxRunAt.Format(time.RFC3339))
	}
	if err := c.checkBudgetTimes(j, cfg, co, now); err != nil {
		return engine.NewJob{}, fmt.Errorf("%s: %w", name, err)
	}
	return j, nil
}

// checkBudgetTimes refuses a job that draws on a rate-limit budget (its
// kind's, or its queue's as this client's registry declares it) and would
// run after engine.MaxLimitedRunAt, the last time a budget's nanoseconds
// hold: no budget would ever admit it.
func (c *Client) checkBudgetTimes(j engine.NewJob, cfg enqueueConfig, co *engine.Coalesce, now time.Time) error {
	what, at := "the clock", now
	if j.RunAt.After(at) {
		what, at = "RunAt", j.RunAt
		if cfg.delaySet {
			what = "Delay"
		}
	}
	if co != nil && co.Rule.Debounce > 0 && now.Add(co.Rule.Debounce).After(at) {
		what, at = "the debounce", now.Add(co.Rule.Debounce)
	}
	if !at.After(engine.MaxLimitedRunAt) {
		return nil
	}
	var budget string
	switch limits := c.reg.queueLimits(j.Queue); {
	case len(j.RateKeys) > 0:
		budget = j.RateKeys[0].Key
	case len(limits) > 0:
		budget = limits[0].Key
	default:
		return nil
	}
	return fmt.Errorf("%s puts the run time at %s, after %s: the job draws on rate-limit budget %s, whose times (nanoseconds since 1970) end there, so it would never be admitted; schedule it earlier",
		what, at.UTC().Format(time.RFC3339), engine.MaxLimitedRunAt.Format(time.RFC3339), budget)
}

// kindOf returns args' Kind, or its panic as an error.
func kindOf(args Args) (name string, err error) {
	defer recoverAs(&err, fmt.Sprintf("%T: Kind", args))
	return args.Kind(), nil
}

// encodeArgs encodes args to JSON, refusing args that the encoding would
// change. encoding/json turns each byte of a string that is not valid
// UTF-8 into the escape \ufffd (a valid U+FFFD it writes as is), so the
// encoded text is scanned for that escape, and only when it holds one is
// the value walked to name the field. An escape that no field explains
// came from a MarshalJSON method, and is kept. It refuses args nested
// deeper than a worker decodes too (checkArgsDepth).
func encodeArgs(args Args) ([]byte, error) {
	body, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("encode args: %w", err)
	}
	if err := checkArgsDepth(body); err != nil {
		return nil, err
	}
	if hasReplacementEscape(body) {
		if path, bad, ok := findInvalidUTF8(reflect.ValueOf(args), ""); ok {
			if path == "" {
				return nil, fmt.Errorf("%w: the args are not valid UTF-8: %s", ErrInvalidArgs, keys.Preview(bad))
			}
			return nil, fmt.Errorf("%w: args field %s: invalid UTF-8: %s", ErrInvalidArgs, path, keys.Preview(bad))
		}
	}
	return body, nil
}

// hasReplacementEscape reports whether JSON text holds the escape \ufffd
// (not the text "\\ufffd", an escaped backslash before "ufffd").
func hasReplacementEscape(b []byte) bool {
	const esc = `\ufffd`
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(esc))
		if i < 0 {
			return false
		}
		i += off
		n := 0
		for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
			n++
		}
		if n%2 == 0 {
			return true
		}
		off = i + len(esc)
	}
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// findInvalidUTF8 walks v as encoding/json would encode it and returns the
// path (Go field names, [i] for items, ["key"] for map entries) and value
// of the first string that is not valid UTF-8.
func findInvalidUTF8(v reflect.Value, path string) (string, string, bool) {
	if !v.IsValid() {
		return "", "", false
	}
	if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return "", "", false
	}
	t := v.Type()
	if !t.Implements(jsonMarshaler) && t.Implements(textMarshaler) && v.CanInterface() {
		// Encoded as its text, which encoding/json escapes as a string.
		text, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err == nil && !utf8.Valid(text) {
			return path, string(text), true
		}
		return "", "", false
	}
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); !utf8.ValidString(s) {
			return path, s, true
		}
	case reflect.Pointer, reflect.Interface:
		return findInvalidUTF8(v.Elem(), path)
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if (!f.IsExported() && !f.Anonymous) || f.Tag.Get("json") == "-" {
				continue
			}
			if p, s, ok := findInvalidUTF8(v.Field(i), joinPath(path, f.Name)); ok {
				return p, s, true
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			k := iter.Key()
			var name string
			if k.Kind() == reflect.String {
				if !utf8.ValidString(k.String()) {
					return path + "[" + keys.Preview(k.String()) + "]", k.String(), true
				}
				name = "[" + keys.Preview(k.String()) + "]"
			} else {
				name = fmt.Sprintf("[%v]", k)
			}
			if p, s, ok := findInvalidUTF8(iter.Value(), path+name); ok {
				return p, s, true
			}
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && v.Kind() == reflect.Slice {
			return "", "", false // []byte: base64
		}
		for i := 0; i < v.Len(); i++ {
			if p, s, ok := findInvalidUTF8(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); ok {
				return p, s, true
			}
		}
	}
	return "", "", false
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
