package cli_test

import (
	"context"
	"fmt"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

type backfill struct{}

func (backfill) Kind() string { return "backfill" }

// An app keeps cli's commands, sets what flags cannot say, and adds a
// command of its own that opens the store as the built-in ones do.
func ExampleApp() {
	reg := jobs.NewRegistry()
	_ = jobs.Register(reg, func(context.Context, *jobs.Job[backfill]) error { return nil })
	logRuns := func(ctx context.Context, run jobs.JobInfo, next func(context.Context) error) error {
		err := next(ctx)
		fmt.Println("ran", run.Kind, "attempt", run.Attempt, "err", err)
		return err
	}
	app := &cli.App{
		Name:         "myapp",
		Registry:     reg,
		Worker:       jobs.WorkerConfig{Concurrency: 50, Middleware: []jobs.Middleware{logRuns}},
		StoreOptions: []store.Option{store.DeleteOnComplete()},
		Commands: []cli.Command{{
			Name:    "backfill",
			Summary: "enqueue the backfill",
			Run: func(ctx context.Context, env *cli.Env, args []string) error {
				fs, url := env.FlagSet("backfill", "backfill [flags]")
				if err := cli.Parse(fs, args); err != nil {
					return err
				}
				s, err := env.Open(ctx, url, true)
				if err != nil {
					return err
				}
				defer s.Close()
				_, err = jobs.NewClient(s, reg, jobs.ClientConfig{}).Enqueue(ctx, backfill{})
				return err
			},
		}},
	}
	// In main: os.Exit(app.Main()).
	_ = app
}
