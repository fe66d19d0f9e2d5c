package cli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/jobs"
)

// logFlag adds --log-level to fs.
func logFlag(fs *flag.FlagSet) *string {
	return fs.String("log-level", "info", "log level: debug, info, warn or error")
}

func (e *Env) logger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, Usagef("--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{Level: l})), nil
}

func runWorker(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("worker", "worker [--queues a,b] [--concurrency N] [flags]")
	queues := fs.String("queues", jobs.DefaultQueue, "queues to claim from, in order, comma-separated")
	concurrency := fs.Int("concurrency", jobs.DefaultConcurrency, "jobs run at once")
	poll := fs.Duration("poll-interval", jobs.DefaultPollInterval, "how often an idle worker looks for jobs")
	jobTimeout := fs.Duration("job-timeout", jobs.DefaultJobTimeout, "bound on one run unless its kind sets one; negative for none")
	shutdown := fs.Duration("shutdown-timeout", jobs.DefaultShutdownTimeout, "how long running jobs get to finish on SIGTERM")
	hostClock := fs.Bool("host-clock", false, "decide rate limits on this host's clock instead of the database's")
	level := logFlag(fs)
	if err := Parse(fs, args); err != nil {
		return err
	}
	if *concurrency < 1 {
		return Usagef("--concurrency is %d; it must be at least 1", *concurrency)
	}
	qs := splitList(*queues)
	if len(qs) == 0 {
		return Usagef("--queues is empty")
	}
	log, err := env.logger(*level)
	if err != nil {
		return err
	}
	s, err := OpenChecked(ctx, *url)
	if err != nil {
		return err
	}
	defer s.Close()
	w, err := jobs.NewWorker(s, env.App.Registry, jobs.WorkerConfig{
		Queues: qs, Concurrency: *concurrency, PollInterval: *poll, JobTimeout: *jobTimeout,
		ShutdownTimeout: *shutdown, HostClock: *hostClock, Logger: log,
	})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

func runDispatcher(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("dispatcher", "dispatcher [--interval 1s] [--batch-size 500] [flags]")
	interval := fs.Duration("interval", dispatcher.DefaultInterval, "how often to look for due jobs")
	batch := fs.Int("batch-size", dispatcher.DefaultBatchSize, "jobs one promotion moves")
	level := logFlag(fs)
	if err := Parse(fs, args); err != nil {
		return err
	}
	if *batch < 1 {
		return Usagef("--batch-size is %d; it must be at least 1", *batch)
	}
	if *interval <= 0 {
		return Usagef("--interval must be positive")
	}
	log, err := env.logger(*level)
	if err != nil {
		return err
	}
	s, err := OpenChecked(ctx, *url)
	if err != nil {
		return err
	}
	defer s.Close()
	return dispatcher.New(s, dispatcher.Config{Interval: *interval, BatchSize: *batch, Logger: log}).Run(ctx)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// fmtIn prints how far t is from now: "in 3s", "2m ago", or "now".
func fmtIn(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now).Round(time.Millisecond)
	switch {
	case d > 0:
		return fmt.Sprintf("in %s", d)
	case d < 0:
		return fmt.Sprintf("%s ago", -d)
	}
	return "now"
}
