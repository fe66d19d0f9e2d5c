package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/store"
)

// DefaultMaxArgsBytes is the largest encoded args an enqueue accepts.
const DefaultMaxArgsBytes = 1 << 20

// ErrArgsTooLarge is wrapped by the error for args over the size cap.
var ErrArgsTooLarge = errors.New("args too large")

// ClientConfig configures a Client. The zero value is usable.
type ClientConfig struct {
	// Clock stamps enqueues and resolves delays. Defaults to the system
	// clock. With the system clock, the concurrency slots an enqueue takes
	// are stamped on the database's clock; with another, on Clock.
	Clock clock.Clock
	// MaxArgsBytes caps the encoded size of one job's args. Defaults to
	// DefaultMaxArgsBytes (1 MiB).
	MaxArgsBytes int
	// OnEnqueue, if set, is called for each job an enqueue wrote or
	// joined, after it was written (for EnqueueTx, before the caller's
	// commit).
	OnEnqueue func(EnqueueEvent)
}

// EnqueueEvent describes one enqueued job.
type EnqueueEvent struct {
	Kind  string
	Queue string
	Enqueued
}

// Client enqueues jobs. It is safe for concurrent use.
type Client struct {
	store     *store.Store
	reg       *Registry
	clock     clock.Clock
	maxArgs   int
	onEnqueue func(EnqueueEvent)
}

// NewClient returns a client that enqueues into s the kinds reg knows.
func NewClient(s *store.Store, reg *Registry, cfg ClientConfig) *Client {
	if cfg.MaxArgsBytes <= 0 {
		cfg.MaxArgsBytes = DefaultMaxArgsBytes
	}
	return &Client{store: s, reg: reg, clock: clock.OrSystem(cfg.Clock), maxArgs: cfg.MaxArgsBytes, onEnqueue: cfg.OnEnqueue}
}

// Store returns the client's store.
func (c *Client) Store() *store.Store { return c.store }

// Enqueued is what became of one enqueued job: its id (a new job's, or the
// pending job's it joined), whether it joined one, and its state.
type Enqueued = store.Enqueued

// Item is one job of an EnqueueMany.
type Item struct {
	Args    Args
	Options []EnqueueOption
}

// Enqueue adds one job and says what became of it: its id, and, for a
// kind that coalesces, whether it joined a pending job.
func (c *Client) Enqueue(ctx context.Context, args Args, opts ...EnqueueOption) (Enqueued, error) {
	res, err := c.enqueue(ctx, nil, []Item{{Args: args, Options: opts}})
	if err != nil {
		return Enqueued{}, err
	}
	return res[0], nil
}

// EnqueueTx adds one job inside the caller's transaction, so that it
// commits or rolls back with the caller's own writes: a pgx.Tx on
// PostgreSQL, a *sql.Tx on MySQL and SQLite.
func (c *Client) EnqueueTx(ctx context.Context, tx any, args Args, opts ...EnqueueOption) (Enqueued, error) {
	ex, err := c.wrapTx(tx)
	if err != nil {
		return Enqueued{}, err
	}
	res, err := c.enqueue(ctx, ex, []Item{{Args: args, Options: opts}})
	if err != nil {
		return Enqueued{}, err
	}
	return res[0], nil
}

// EnqueueMany adds jobs in as few statements as the database allows (one
// multi-row insert per batch) and says what became of each, in order.
// Every item is checked first: one bad item writes none of them, and the
// error names its index.
func (c *Client) EnqueueMany(ctx context.Context, items []Item) ([]Enqueued, error) {
	return c.enqueue(ctx, nil, items)
}

// EnqueueManyTx is EnqueueMany inside the caller's transaction.
func (c *Client) EnqueueManyTx(ctx context.Context, tx any, items []Item) ([]Enqueued, error) {
	ex, err := c.wrapTx(tx)
	if err != nil {
		return nil, err
	}
	return c.enqueue(ctx, ex, items)
}

// EnqueueIn is EnqueueMany through a transaction of the store's own (a
// store.Tx), for sluice's components that enqueue alongside other writes;
// callers with their own pgx.Tx or *sql.Tx use EnqueueManyTx.
func (c *Client) EnqueueIn(ctx context.Context, ex store.Executor, items []Item) ([]Enqueued, error) {
	if ex == nil {
		return nil, errors.New("jobs: EnqueueIn: the executor is nil")
	}
	return c.enqueue(ctx, ex, items)
}

func (c *Client) wrapTx(tx any) (store.Executor, error) {
	if tx == nil {
		return nil, errors.New("jobs: EnqueueTx: the transaction is nil")
	}
	ex, err := c.store.DB().WrapTx(tx)
	if err != nil {
		return nil, fmt.Errorf("jobs: EnqueueTx: %w", err)
	}
	return ex, nil
}

func (c *Client) enqueue(ctx context.Context, ex store.Executor, items []Item) ([]Enqueued, error) {
	if len(items) == 0 {
		return nil, nil
	}
	now := c.clock.Now()
	rows := make([]store.NewJob, len(items))
	for i, it := range items {
		row, err := c.newJob(it, now)
		if err != nil {
			if len(items) > 1 {
				return nil, fmt.Errorf("jobs: enqueue item %d: %w", i, err)
			}
			return nil, fmt.Errorf("jobs: enqueue: %w", err)
		}
		rows[i] = row
	}
	sc := store.HostTime(func() time.Time { return now })
	if clock.IsSystem(c.clock) {
		sc = store.DatabaseTime(func() time.Time { return now })
	}
	res, err := c.store.Enqueue(ctx, ex, sc, rows)
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	if ex == nil {
		c.wakeReady(rows, res)
	}
	if c.onEnqueue != nil {
		for i, r := range rows {
			c.onEnqueue(EnqueueEvent{Kind: r.Kind, Queue: r.Queue, Enqueued: res[i]})
		}
	}
	return res, nil
}

// wakeReady wakes this process's workers for the queues that gained ready
// jobs.
func (c *Client) wakeReady(rows []store.NewJob, res []Enqueued) {
	seen := map[string]bool{}
	for i, r := range rows {
		if res[i].State == store.StateReady && !seen[r.Queue] {
			seen[r.Queue] = true
			c.store.Wake(r.Queue)
		}
	}
}

// newJob checks one item and computes everything stored with it: encoded
// args, queue, priority, run time and rate-limit keys.
func (c *Client) newJob(it Item, now time.Time) (store.NewJob, error) {
	if it.Args == nil || isNilPointer(it.Args) {
		return store.NewJob{}, errors.New("args are nil")
	}
	name := it.Args.Kind()
	k := c.reg.lookup(name)
	if k == nil {
		return store.NewJob{}, fmt.Errorf("%w: %q (register it, or Declare it where another process runs it)", ErrUnknownKind, name)
	}
	if t := reflect.TypeOf(it.Args); t != k.argsType {
		return store.NewJob{}, fmt.Errorf("kind %s is registered with args %s, not %s", name, k.argsType, t)
	}
	cfg := enqueueConfig{}
	for _, o := range it.Options {
		if o == nil {
			return store.NewJob{}, fmt.Errorf("%s: nil option", name)
		}
		if err := o.applyEnqueue(&cfg); err != nil {
			return store.NewJob{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	body, err := json.Marshal(it.Args)
	if err != nil {
		return store.NewJob{}, fmt.Errorf("%s: encode args: %w", name, err)
	}
	if len(body) > c.maxArgs {
		return store.NewJob{}, fmt.Errorf("%s: %w: %d bytes encoded, the cap is %d", name, ErrArgsTooLarge, len(body), c.maxArgs)
	}
	keys, err := k.rateKeys(it.Args)
	if err != nil {
		return store.NewJob{}, fmt.Errorf("%s: %w", name, err)
	}
	conc, err := k.concLimit(it.Args)
	if err != nil {
		return store.NewJob{}, fmt.Errorf("%s: %w", name, err)
	}
	co, err := k.coalesceKey(it.Args)
	if err != nil {
		return store.NewJob{}, fmt.Errorf("%s: %w", name, err)
	}
	j := store.NewJob{
		Kind: name, Queue: k.cfg.queue, Priority: k.cfg.priority, Args: body,
		MaxAttempts: k.cfg.maxAttempts, RateKeys: keys, Conc: conc, Coalesce: co,
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
	return j, nil
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
