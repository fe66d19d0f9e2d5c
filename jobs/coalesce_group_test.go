package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// restockShop is a third kind that may name refresh's coalescing Group.
type restockShop struct {
	Shop int
	Qty  int
}

func (restockShop) Kind() string { return "restock_shop" }

func byShopR(a restockShop) any { return a.Shop }

// docs/coalesce.md: kinds that name one Group share its keys, and a call
// joins the pending job of its key whatever its kind, applying its own
// rule: so registration refuses a kind whose Group another kind uses with
// another rule, and any sharing of Replace or Collect keys (each kind has
// its own args type, which another kind's handler would misread or drop).
// The error names both kinds, the Group and what differs; the kind refused
// is not registered.
func TestKindsOfOneCoalesceGroupShareOnlyOneDiscardRule(t *testing.T) {
	noop := func(context.Context, *jobs.Job[refresh]) error { return nil }
	noopR := func(context.Context, *jobs.Job[restockShop]) error { return nil }
	calls := func(context.Context, *jobs.Job[pushSKU], []pushSKU) error { return nil }
	for _, c := range []struct {
		name  string
		first func(*jobs.Registry) error
		then  func(*jobs.Registry) error
		kind  string // refused
		want  []string
	}{
		{
			name: "collect after discard",
			first: func(r *jobs.Registry) error {
				return jobs.Register(r, noop, jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Group: "shop"}))
			},
			then: func(r *jobs.Registry) error {
				return jobs.RegisterCalls(r, calls, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, Group: "shop", OnConflict: coalesce.Collect}))
			},
			kind: "push_sku",
			want: []string{"register push_sku", `Group "shop" is used by kind refresh`, "OnConflict: discard", "push_sku declares OnConflict: collect", "jobs_test.pushSKU", "jobs_test.refresh", "Only Discard keys are shared"},
		},
		{
			name: "discard after collect",
			first: func(r *jobs.Registry) error {
				return jobs.RegisterCalls(r, calls, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, Group: "shop", OnConflict: coalesce.Collect}))
			},
			then: func(r *jobs.Registry) error {
				return jobs.Register(r, noop, jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Group: "shop"}))
			},
			kind: "refresh",
			want: []string{"register refresh", `Group "shop" is used by kind push_sku`, "OnConflict: collect", "refresh declares OnConflict: discard"},
		},
		{
			name: "replace after discard",
			first: func(r *jobs.Registry) error {
				return jobs.Register(r, noop, jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Group: "shop"}))
			},
			then: func(r *jobs.Registry) error {
				return jobs.Register(r, noopR, jobs.Coalesce(coalesce.Rule[restockShop]{Key: byShopR, Group: "shop", OnConflict: coalesce.Replace}))
			},
			kind: "restock_shop",
			want: []string{"register restock_shop", `Group "shop" is used by kind refresh`, "restock_shop declares OnConflict: replace"},
		},
		{
			name: "replace beside replace",
			first: func(r *jobs.Registry) error {
				return jobs.Register(r, noop, jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Group: "shop", OnConflict: coalesce.Replace}))
			},
			then: func(r *jobs.Registry) error {
				return jobs.Register(r, noopR, jobs.Coalesce(coalesce.Rule[restockShop]{Key: byShopR, Group: "shop", OnConflict: coalesce.Replace}))
			},
			kind: "restock_shop",
			want: []string{"register restock_shop", "OnConflict: replace (args jobs_test.refresh)", "OnConflict: replace (args jobs_test.restockShop)"},
		},
		{
			name: "another debounce",
			first: func(r *jobs.Registry) error {
				return jobs.Register(r, noop, jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Group: "shop"}))
			},
			then: func(r *jobs.Registry) error {
				return jobs.Register(r, noopR, jobs.Coalesce(coalesce.Rule[restockShop]{Key: byShopR, Group: "shop", Debounce: time.Minute, MaxDelay: time.Hour}))
			},
			kind: "restock_shop",
			want: []string{"register restock_shop", `Group "shop" is used by kind refresh with another rule`, "Debounce 1m0s, not 0s and MaxDelay 1h0m0s, not 0s"},
		},
		{
			name: "a Group named after a kind without one",
			first: func(r *jobs.Registry) error {
				return jobs.Register(r, noop, jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop}))
			},
			then: func(r *jobs.Registry) error {
				return jobs.Register(r, noopR, jobs.Coalesce(coalesce.Rule[restockShop]{Key: byShopR, Group: "refresh", OnConflict: coalesce.Replace}))
			},
			kind: "restock_shop",
			want: []string{"register restock_shop", `keys of scope "refresh" are used by kind refresh`},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := jobs.NewRegistry()
			require.NoError(t, c.first(r))
			err := c.then(r)
			require.Error(t, err)
			for _, w := range c.want {
				require.ErrorContains(t, err, w)
			}
			require.NotContains(t, r.Kinds(), c.kind, "a refused kind is not registered")
		})
	}

	t.Run("discard kinds of any args type with one rule", func(t *testing.T) {
		r := jobs.NewRegistry()
		d, m := time.Minute, 5*time.Minute
		require.NoError(t, jobs.Register(r, noop, jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Group: "shop", Debounce: d, MaxDelay: m})))
		require.NoError(t, jobs.Register(r, noopR, jobs.Coalesce(coalesce.Rule[restockShop]{Key: byShopR, Group: "shop", Debounce: d, MaxDelay: m})))
		// Other Groups, and kinds without one, are their own.
		require.NoError(t, jobs.RegisterCalls(r, calls, jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, Group: "skus", OnConflict: coalesce.Collect})))
	})
}

// Discard groups across kinds stay allowed: a call of one kind joins the
// pending job of another, whose handler runs once with its own args.
func TestADiscardCallJoinsThePendingJobOfAnotherKindOfItsGroup(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var refreshed []refresh
		var restocked []restockShop
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[refresh]) error {
			mu.Lock()
			defer mu.Unlock()
			refreshed = append(refreshed, j.Args)
			return nil
		}, jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Group: "shop"})))
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[restockShop]) error {
			mu.Lock()
			defer mu.Unlock()
			restocked = append(restocked, j.Args)
			return nil
		}, jobs.Coalesce(coalesce.Rule[restockShop]{Key: byShopR, Group: "shop"})))
		first := h.enqueued(refresh{Shop: 1, Note: "first"})
		joined := h.enqueued(restockShop{Shop: 1, Qty: 5})
		require.True(t, joined.Joined)
		require.Equal(t, first.ID, joined.ID)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, []refresh{{Shop: 1, Note: "first"}}, refreshed)
		require.Empty(t, restocked)
	})
}

// deploy is two processes on one database whose registries differ, as
// during a deploy: an old one that declares kind A in a Group, a new one
// that declares kind B in it with another rule. Each kind runs in its own
// queue, worked by the process that knows it.
type deploy struct {
	h        *harness
	old, new *jobs.Registry
	oldC     *jobs.Client
	newC     *jobs.Client
}

func newDeploy(h *harness) *deploy {
	d := &deploy{h: h, old: h.reg, new: jobs.NewRegistry(), oldC: h.client}
	d.newC = jobs.NewClient(testdb.Public(h.store), d.new, jobs.ClientConfig{Clock: h.clock})
	return d
}

func (d *deploy) enqueue(c *jobs.Client, args jobs.Args) jobs.Enqueued {
	d.h.t.Helper()
	res, err := c.Enqueue(context.Background(), args)
	require.NoError(d.h.t, err)
	return res
}

func (d *deploy) drain(reg *jobs.Registry, queue string) jobs.DrainResult {
	d.h.t.Helper()
	w, err := jobs.NewWorker(testdb.Public(d.h.store), reg, jobs.WorkerConfig{Clock: d.h.clock, Logger: quiet(), Queues: []string{queue}})
	require.NoError(d.h.t, err)
	res, err := w.Drain(context.Background())
	require.NoError(d.h.t, err)
	return res
}

// A Collect call never vanishes into another kind's job of its Group:
// registration refuses the mix, and where two processes' registries
// differ (a deploy), the call does not join the other kind's pending job
// but makes a job of its own, and its handler gets it.
func TestACollectingKindsCallNeverVanishesIntoAnotherKindsJobOfItsGroup(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var refreshed []refresh
		var pushed []string
		refreshRule := jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Group: "shop"})
		pushRule := jobs.Coalesce(coalesce.Rule[pushSKU]{Key: byShopP, Group: "shop", OnConflict: coalesce.Collect})
		refreshWork := func(_ context.Context, j *jobs.Job[refresh]) error {
			mu.Lock()
			defer mu.Unlock()
			refreshed = append(refreshed, j.Args)
			return nil
		}
		pushWork := func(_ context.Context, _ *jobs.Job[pushSKU], calls []pushSKU) error {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range calls {
				pushed = append(pushed, c.SKU)
			}
			return nil
		}
		require.NoError(t, jobs.Register(h.reg, refreshWork, refreshRule))
		require.ErrorContains(t, jobs.RegisterCalls(h.reg, pushWork, pushRule), "Only Discard keys are shared between kinds")

		d := newDeploy(h)
		require.NoError(t, jobs.RegisterCalls(d.new, pushWork, pushRule, jobs.Queue("push")))
		first := d.enqueue(d.oldC, refresh{Shop: 1, Note: "r"})
		a := d.enqueue(d.newC, pushSKU{Shop: 1, SKU: "sku-a"})
		batch, err := d.newC.EnqueueMany(context.Background(), []jobs.Item{{Args: pushSKU{Shop: 1, SKU: "sku-b"}}, {Args: pushSKU{Shop: 1, SKU: "sku-c"}}})
		require.NoError(t, err)
		ids := map[int64]bool{first.ID: true}
		for _, res := range append([]jobs.Enqueued{a}, batch...) {
			require.False(t, res.Joined, "a collect call does not join another kind's job")
			require.False(t, ids[res.ID], "each call makes a job of its own: none holds the key, the refresh job does")
			ids[res.ID] = true
		}
		require.True(t, d.enqueue(d.oldC, refresh{Shop: 1, Note: "again"}).Joined, "the refresh job still holds the key")

		require.Equal(t, 1, d.drain(d.old, "default").Completed)
		require.Equal(t, 3, d.drain(d.new, "push").Completed)
		require.Equal(t, []refresh{{Shop: 1, Note: "r"}}, refreshed)
		require.ElementsMatch(t, []string{"sku-a", "sku-b", "sku-c"}, pushed, "every collect call reached the push_sku handler")
	})
}

// A Replace call never gives another kind's handler its args: registration
// refuses the mix, and where two processes' registries differ, the call
// makes a job of its own; the pending job of the other kind keeps its
// args.
func TestAReplacingCallOfAnotherKindInTheGroupNeverHandsAHandlerForeignArgs(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var refreshed []refresh
		var restocked []restockShop
		refreshWork := func(_ context.Context, j *jobs.Job[refresh]) error {
			mu.Lock()
			defer mu.Unlock()
			refreshed = append(refreshed, j.Args)
			return nil
		}
		restockWork := func(_ context.Context, j *jobs.Job[restockShop]) error {
			mu.Lock()
			defer mu.Unlock()
			restocked = append(restocked, j.Args)
			return nil
		}
		restockRule := jobs.Coalesce(coalesce.Rule[restockShop]{Key: byShopR, Group: "shop", OnConflict: coalesce.Replace})
		require.NoError(t, jobs.Register(h.reg, refreshWork, jobs.Coalesce(coalesce.Rule[refresh]{Key: byShop, Group: "shop"})))
		require.ErrorContains(t, jobs.Register(h.reg, restockWork, restockRule), "Only Discard keys are shared between kinds")

		d := newDeploy(h)
		require.NoError(t, jobs.Register(d.new, restockWork, restockRule, jobs.Queue("restock")))
		first := d.enqueue(d.oldC, refresh{Shop: 1, Note: "from the refresh call"})
		own := d.enqueue(d.newC, restockShop{Shop: 1, Qty: 5})
		require.False(t, own.Joined)
		require.NotEqual(t, first.ID, own.ID)

		require.Equal(t, 1, d.drain(d.old, "default").Completed)
		require.Equal(t, 1, d.drain(d.new, "restock").Completed)
		require.Equal(t, []refresh{{Shop: 1, Note: "from the refresh call"}}, refreshed,
			"the refresh handler ran with the refresh call's args, not a restock_shop call's")
		require.Equal(t, []restockShop{{Shop: 1, Qty: 5}}, restocked)
	})
}
