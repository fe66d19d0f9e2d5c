// Package docsnippets_test holds every Go snippet of README.md and docs/*.md,
// adapted as little as a reader would (the names a snippet leaves to the
// reader are declared here), so that a snippet that stops compiling against
// the API fails the build. Each function is named for the page and the
// snippet's place on it; the snippets are never run. copies_test.go checks
// that they are still the pages' own, and links_test.go and
// test_names_test.go that the pages' links and the tests they name exist.
package docsnippets_test

//lint:file-ignore SA4006 the snippets elide their error checks, as the docs print them

import (
	"context"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/otelsluice"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
	"github.com/sluicequeue/sluice/ui"
)

// What the snippets leave to the reader.
var (
	ctx    = context.Background()
	tx     any // a pgx.Tx or *sql.Tx
	stripe struct {
		Sync func(ctx context.Context, id int64) error
	}
	shop struct {
		PushInventory func(ctx context.Context, skus []string) error
	}
	_ = flag.ContinueOnError
)

// ---- README.md ----------------------------------------------------------

type SyncAccount struct{ AccountID int64 }

func (SyncAccount) Kind() string { return "sync_account" }

type Backfill struct{}

func (Backfill) Kind() string { return "backfill" }

func readmeShortExample() error {
	reg := jobs.NewRegistry()
	err := jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SyncAccount]) error {
		return stripe.Sync(ctx, j.Args.AccountID)
	},
		jobs.Queue("stripe"),
		// At most 100 claims in any minute, 10 at once, per account.
		jobs.RateLimit(ratelimit.Limit[SyncAccount]{
			To: 100, Per: time.Minute, Burst: 10,
			Key: func(a SyncAccount) any { return a.AccountID },
		}),
	)

	s, err := store.Open(ctx, "postgres://app@db/app") // mysql://…, sqlite:PATH
	_, err = s.MigrateUp(ctx, 0)                       // or `myapp migrate up`: until then enqueues return store.ErrPendingMigrations
	client := jobs.NewClient(s, reg, jobs.ClientConfig{})
	res, err := client.Enqueue(ctx, SyncAccount{AccountID: 42})     // res.ID
	res, err = client.EnqueueTx(ctx, tx, SyncAccount{AccountID: 7}) // commits with your own writes

	w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{Queues: []string{"stripe"}, Concurrency: 20})
	go w.Run(ctx)

	d, err := dispatcher.New(s, dispatcher.Config{}) // promotes scheduled jobs: run at least one
	go d.Run(ctx)
	_ = res.ID
	return err
}

func readmeSharedPool(pool *pgxpool.Pool) {
	_, _ = store.OpenPostgresPool(ctx, pool)
	_, _ = store.OpenMySQLDB(ctx, nil)
	_, _ = store.OpenSQLiteDB(ctx, nil)
}

func readmeMain(reg *jobs.Registry) { os.Exit(cli.Main(reg)) }

func readmeApp(reg *jobs.Registry, trace jobs.Middleware, hooks jobs.Hooks) {
	app := &cli.App{
		Registry:     reg,
		Worker:       jobs.WorkerConfig{Middleware: []jobs.Middleware{trace}, Hooks: hooks},
		StoreOptions: []store.Option{store.DeleteOnComplete()},
		Commands: []cli.Command{{Name: "backfill", Summary: "enqueue the backfill",
			Run: func(ctx context.Context, env *cli.Env, args []string) error {
				fs, url := env.FlagSet("backfill", "backfill [flags]") // carries --database-url
				if err := cli.Parse(fs, args); err != nil {
					return err
				}
				s, err := env.Open(ctx, url, true) // as the built-in commands open it
				if err != nil {
					return err
				}
				defer s.Close()
				_, err = jobs.NewClient(s, reg, jobs.ClientConfig{}).Enqueue(ctx, Backfill{})
				return err
			}}},
	}
	os.Exit(app.Main())
}

// The package jobs doc comment.
func jobsPackageDoc(reg *jobs.Registry) {
	jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SyncAccount]) error {
		return stripe.Sync(ctx, j.Args.AccountID)
	}, jobs.RateLimit(ratelimit.Limit[SyncAccount]{To: 100, Per: time.Minute, Burst: 10, Key: "global"}))
}

// The package ui doc comment.
func uiPackageDoc(mux *http.ServeMux, s *store.Store, reg *jobs.Registry, secret []byte) {
	mux.Handle("/admin/jobs/", http.StripPrefix("/admin/jobs", ui.Handler(s, reg, ui.Options{})))
	dash, err := ui.New(s, reg, ui.Options{Secret: secret}) // the same 32 or more bytes on every replica
	_, _ = dash, err
}

// ---- docs/rate-limits.md -------------------------------------------------

type SyncStripeCustomer struct{ AccountID int64 }

func (SyncStripeCustomer) Kind() string { return "sync_stripe_customer" }

func syncStripeCustomer(ctx context.Context, j *jobs.Job[SyncStripeCustomer]) error { return nil }

func rateLimitsIntro(reg *jobs.Registry) {
	jobs.Register(reg, syncStripeCustomer,
		// At most 100 claims in any minute, 10 of them at once.
		jobs.RateLimit(ratelimit.Limit[SyncStripeCustomer]{
			To: 100, Per: time.Minute, Burst: 10, Key: "global",
		}))
}

func rateLimitsQueue(reg *jobs.Registry) {
	reg.LimitQueue("sms", ratelimit.QueueLimit{To: 500, Per: time.Minute, Burst: 20})
}

func rateLimits429(resp *http.Response) error {
	if resp.StatusCode == http.StatusTooManyRequests {
		return jobs.RetryAfterResponse(resp, time.Minute) // Retry-After in seconds or an HTTP date; a minute without one
	}
	return jobs.RetryAfter(time.Second)
}

type SyncShop struct{ ShopID int64 }

func (SyncShop) Kind() string { return "sync_shop" }

func syncShop(ctx context.Context, j *jobs.Job[SyncShop]) error { return nil }

type SyncRepo struct{ InstallationID int64 }

func (SyncRepo) Kind() string { return "sync_repo" }

func syncRepo(ctx context.Context, j *jobs.Job[SyncRepo]) error { return nil }

type SendSMS struct{ From, To, Body string }

func (SendSMS) Kind() string { return "send_sms" }

func sendSMS(ctx context.Context, j *jobs.Job[SendSMS]) error { return nil }

func rateLimitsProviders(reg *jobs.Registry) {
	// Shopify REST Admin API: a bucket of 40 per store, leaking 2 a second.
	jobs.Register(reg, syncShop,
		jobs.RateLimit(ratelimit.Limit[SyncShop]{
			To: 41, Per: time.Second, Burst: 40, // C + n − 1 per P, burst C
			Key: func(a SyncShop) any { return a.ShopID },
		}))

	// 100 a second, no burst stated.
	jobs.Register(reg, syncStripeCustomer,
		jobs.RateLimit(ratelimit.Limit[SyncStripeCustomer]{
			To: 100, Per: time.Second, Burst: 1, Key: "global",
		}))

	// GitHub: 5,000 an hour per installation, reset on the hour.
	jobs.Register(reg, syncRepo,
		jobs.RateLimit(ratelimit.Limit[SyncRepo]{
			To: 5000, Per: time.Hour, Burst: 50, // drains at 4,951 an hour
			Key: func(a SyncRepo) any { return a.InstallationID },
		}))

	// One message a second per sender number: a budget per sender.
	jobs.Register(reg, sendSMS,
		jobs.RateLimit(ratelimit.Limit[SendSMS]{
			To: 1, Per: time.Second, Burst: 1,
			Key: func(a SendSMS) any { return a.From },
		}))
}

// ---- docs/concurrency.md -------------------------------------------------

type SyncAccountC struct{ AccountID int64 } // the page's SyncAccount

func (SyncAccountC) Kind() string { return "sync_account" }

func syncAccount(ctx context.Context, j *jobs.Job[SyncAccountC]) error { return nil }

func concurrencyIntro(reg *jobs.Registry) {
	jobs.Register(reg, syncAccount,
		jobs.ConcurrencyLimit(concurrency.Limit[SyncAccountC]{
			Key: func(a SyncAccountC) any { return a.AccountID }, // To defaults to 1
		}))
}

type SyncStripeAccount struct{ AccountID int64 }

func (SyncStripeAccount) Kind() string { return "sync_stripe_account" }

func syncStripeAccount(ctx context.Context, j *jobs.Job[SyncStripeAccount]) error { return nil }

func concurrencyRecipe(reg *jobs.Registry) {
	jobs.Register(reg, syncStripeAccount,
		jobs.ConcurrencyLimit(concurrency.Limit[SyncStripeAccount]{
			Key: func(a SyncStripeAccount) any { return a.AccountID },
		}),
		jobs.RateLimit(ratelimit.Limit[SyncStripeAccount]{
			To: 5, Per: time.Second, Burst: 2, Group: "Stripe", Key: "global",
		}))
}

// ---- docs/coalesce.md ----------------------------------------------------

type SyncShopProducts struct{ ShopID int64 }

func (SyncShopProducts) Kind() string { return "sync_shop_products" }

func syncShopProducts(ctx context.Context, j *jobs.Job[SyncShopProducts]) error { return nil }

func coalesceIntro(reg *jobs.Registry, client *jobs.Client) {
	jobs.Register(reg, syncShopProducts,
		jobs.Coalesce(coalesce.Rule[SyncShopProducts]{
			Key: func(a SyncShopProducts) any { return a.ShopID },
		}))

	res, err := client.Enqueue(ctx, SyncShopProducts{ShopID: 42})
	// res.ID is the job; res.Joined says whether the call joined a pending one.
	_, _, _ = res.ID, res.Joined, err
}

type PushInventory struct {
	ShopID int64
	SKU    string
}

func (PushInventory) Kind() string { return "push_inventory" }

func byShop(a PushInventory) any { return a.ShopID }

func skus(calls []PushInventory) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.SKU
	}
	return out
}

func coalesceCollect(reg *jobs.Registry) {
	jobs.RegisterCalls(reg, func(ctx context.Context, j *jobs.Job[PushInventory], calls []PushInventory) error {
		return shop.PushInventory(ctx, skus(calls)) // one bulk request
	}, jobs.Coalesce(coalesce.Rule[PushInventory]{Key: byShop, OnConflict: coalesce.Collect, MaxCalls: 100}))
}

// ---- docs/fairness.md ----------------------------------------------------

type ExportReport struct {
	TenantID int64
	Plan     string
}

func (ExportReport) Kind() string { return "export_report" }

func exportReport(ctx context.Context, j *jobs.Job[ExportReport]) error { return nil }

func planWeight(plan string) int { return 1 }

func fairnessIntro(reg *jobs.Registry) error {
	err := jobs.Register(reg, exportReport,
		jobs.Fair(func(a ExportReport) any { return a.TenantID }),
		// optional: a key of weight 2 gets twice the claims of a key of weight 1
		jobs.FairWeight(func(a ExportReport) int { return planWeight(a.Plan) }),
	)
	return err
}

// ---- docs/recurring.md ---------------------------------------------------

type BuildReport struct{ Period string }

func (BuildReport) Kind() string { return "build_report" }

type SyncExchangeRates struct{}

func (SyncExchangeRates) Kind() string { return "sync_exchange_rates" }

func recurringTasks(reg *jobs.Registry) {
	app := &cli.App{
		Registry: reg,
		Tasks: []dispatcher.Task{
			{Key: "nightly-report", Schedule: "0 3 * * *", Args: BuildReport{Period: "daily"},
				Options: []jobs.EnqueueOption{jobs.Queue("reports")}},
			{Key: "sync-rates", Schedule: "@every 15m", Args: SyncExchangeRates{}},
		},
	}
	os.Exit(app.Main())
}

// ---- docs/operations.md --------------------------------------------------

func operationsMain() {
	reg := jobs.NewRegistry()
	// jobs.Register(reg, …) for every kind
	os.Exit(cli.Main(reg))
}

func reindex(ctx context.Context, env *cli.Env, args []string) error { return nil }

func operationsApp(reg *jobs.Registry, myHooks jobs.Hooks, tracing jobs.Middleware, logger *slog.Logger, pool *pgxpool.Pool) {
	app := &cli.App{
		Registry: reg,
		Worker: jobs.WorkerConfig{ // flags override what they name
			Concurrency: 50,      // the default of --concurrency
			Hooks:       myHooks, // OnClaim, OnDefer, OnFinish
			Middleware:  []jobs.Middleware{tracing},
			Logger:      logger, // instead of --log-level/--log-format
		},
		Dispatcher:   dispatcher.Config{Maintenance: dispatcher.Maintenance{Retention: 7 * 24 * time.Hour}},
		StoreOptions: []store.Option{store.DeleteOnComplete()},
		OpenStore:    func(ctx context.Context, url string) (*store.Store, error) { return store.OpenPostgresPool(ctx, pool) },
		Commands:     []cli.Command{{Name: "reindex", Summary: "…", Run: reindex}},
	}
	os.Exit(app.Main())
}

// ---- docs/observability.md -----------------------------------------------

func timing(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
	began := time.Now()
	err := next(ctx)
	jobs.Logger(ctx).Info("ran", "took", time.Since(began), "deferrals", job.Deferrals, "waited", job.LimitWait)
	return err
}

func handler(ctx context.Context, j *jobs.Job[SyncAccount]) error { return nil }

// store is the page's name for the *store.Store, which shadows the package.
func observabilityRunMiddleware(store *store.Store, reg *jobs.Registry) error {
	w, err := jobs.NewWorker(store, reg, jobs.WorkerConfig{Middleware: []jobs.Middleware{timing}})
	// or for one kind:
	jobs.Register(reg, handler, jobs.WithMiddleware(timing))
	_ = w
	return err
}

func requestID(ctx context.Context) string { return "" }

func observabilityEnqueueMiddleware(store *store.Store, reg *jobs.Registry) {
	stamp := func(ctx context.Context, js []*jobs.EnqueueJob, next func(context.Context) error) error {
		for _, j := range js {
			j.SetMetadata("request_id", requestID(ctx))
		}
		return next(ctx)
	}
	client := jobs.NewClient(store, reg, jobs.ClientConfig{Middleware: []jobs.EnqueueMiddleware{stamp}})
	_ = client
}

func observabilityMetadata(client *jobs.Client) {
	client.Enqueue(ctx, SyncAccount{AccountID: 42}, jobs.WithMetadata(map[string]string{"tenant": "acme"}))
}

func handleMetadata(ctx context.Context, j *jobs.Job[SyncAccount]) error {
	tenant := j.Metadata["tenant"]
	_ = tenant
	return nil
}

func observabilityOtel(store *store.Store, reg *jobs.Registry) error {
	o, err := otelsluice.New(otelsluice.Config{}) // global providers, W3C trace context
	client := jobs.NewClient(store, reg, o.InstrumentClient(jobs.ClientConfig{}))
	worker, err := jobs.NewWorker(store, reg, o.InstrumentWorker(jobs.WorkerConfig{}))
	_, _ = client, worker
	return err
}

func handleLogging(ctx context.Context, j *jobs.Job[SyncAccount]) error {
	jobs.Logger(ctx).Info("syncing", "account", j.Args.AccountID)
	jobs.AddLogAttrs(ctx, func() []slog.Attr { return nil })
	return nil
}

// ---- docs/dashboard.md ---------------------------------------------------

func dashboardMount(s *store.Store, reg *jobs.Registry, d *dispatcher.Dispatcher, secret []byte, mux *http.ServeMux,
	user struct{ IsAdmin bool }, requireAdmin func(http.Handler) http.Handler) error {
	dash, err := ui.New(s, reg, ui.Options{
		ReadOnly: !user.IsAdmin, // hide and refuse every action
		Tasks:    d.Tasks,       // a dispatcher's recurring tasks, for the Recurring page
		Secret:   secret,        // the same 32 or more random bytes on every replica
	})
	if err != nil {
		return err
	}
	mux.Handle("/admin/jobs/", requireAdmin(http.StripPrefix("/admin/jobs", dash)))
	return nil
}

// ---- docs/rate-limits.md: names the text uses ------------------------------

func rateLimitsNames(s *store.Store, client *jobs.Client, reg *jobs.Registry) {
	_ = s.SetOverride
	_ = s.ClearOverride
	_ = s.Overrides
	_ = client.Explain
	_, _ = jobs.Check(ctx, reg, s)
	var e jobs.Explanation
	_ = e
	_ = jobs.LiveAfter
	_ = store.ErrPendingMigrations
	_ = jobs.Declare[SyncAccount]
	var w jobs.WorkerConfig
	_, _, _, _, _ = w.OverrideRefresh, w.Horizon, w.MaxRetryAfter, w.ShadowLimits, w.PollInterval
	var de jobs.DeferEvent
	_, _, _ = de.Swept, de.Displaced, de.Shadow
	var ce jobs.ClaimEvent
	_ = ce.DecidedAt
}

// The snippets compile: that is the test. This one only keeps the linters
// from calling them unused.
func TestDocSnippetsCompile(t *testing.T) {
	_ = []any{readmeShortExample, readmeSharedPool, readmeMain, readmeApp, jobsPackageDoc, uiPackageDoc,
		rateLimitsIntro, rateLimitsQueue, rateLimits429, rateLimitsProviders, concurrencyIntro, concurrencyRecipe,
		coalesceIntro, coalesceCollect, fairnessIntro, recurringTasks, operationsMain, operationsApp,
		observabilityRunMiddleware, observabilityEnqueueMiddleware, observabilityMetadata, handleMetadata,
		observabilityOtel, handleLogging, dashboardMount, rateLimitsNames}
}
