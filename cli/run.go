package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/sluicequeue/sluice/internal/human"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
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
	beat := beatFlags(fs)
	level := logFlag(fs)
	if err := Parse(fs, args); err != nil {
		return err
	}
	if *concurrency < 1 {
		return Usagef("--concurrency is %d; it must be at least 1", *concurrency)
	}
	if *poll < jobs.MinInterval {
		return Usagef("--poll-interval is %s; it must be at least %s", *poll, jobs.MinInterval)
	}
	if *shutdown <= 0 {
		return Usagef("--shutdown-timeout is %s; it must be positive", *shutdown)
	}
	if err := beat.check(fs); err != nil {
		return err
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
		HeartbeatInterval: *beat.heartbeat, DeadAfter: *beat.deadAfter,
	})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

func runDispatcher(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("dispatcher", "dispatcher [--interval 1s] [--batch-size 500] [--config FILE] [flags]")
	interval := fs.Duration("interval", dispatcher.DefaultInterval, "how often to look for due jobs")
	batch := fs.Int("batch-size", dispatcher.DefaultBatchSize, "jobs one promotion moves")
	config := configFlag(fs)
	beat := beatFlags(fs)
	level := logFlag(fs)
	if err := Parse(fs, args); err != nil {
		return err
	}
	if *batch < 1 {
		return Usagef("--batch-size is %d; it must be at least 1", *batch)
	}
	if *interval < jobs.MinInterval {
		return Usagef("--interval is %s; it must be at least %s", *interval, jobs.MinInterval)
	}
	if err := beat.check(fs); err != nil {
		return err
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
	d, err := env.dispatcher(s, *config, dispatcher.Config{
		Interval: *interval, BatchSize: *batch, Logger: log,
		HeartbeatInterval: *beat.heartbeat, DeadAfter: *beat.deadAfter,
	})
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// beats are a process's --heartbeat and --dead-after.
type beats struct{ heartbeat, deadAfter *time.Duration }

// beatFlags adds --heartbeat and --dead-after to fs.
func beatFlags(fs *flag.FlagSet) beats {
	return beats{
		heartbeat: fs.Duration("heartbeat", jobs.DefaultHeartbeatInterval,
			"how often this process stamps its row in sluice_processes and looks for dead processes"),
		deadAfter: fs.Duration("dead-after", jobs.DefaultDeadAfter,
			fmt.Sprintf("how old a heartbeat must be before its process is presumed dead and its running jobs run again; at least %d × --heartbeat, and the same in every process", jobs.DeadAfterHeartbeats)),
	}
}

// check refuses a heartbeat under jobs.MinInterval and a dead-after
// shorter than jobs.DeadAfterHeartbeats heartbeats, which would reap live
// processes and run their jobs twice.
func (b beats) check(fs *flag.FlagSet) error {
	if *b.heartbeat < jobs.MinInterval {
		return Usagef("--heartbeat is %s; it must be at least %s", *b.heartbeat, jobs.MinInterval)
	}
	if *b.heartbeat > *b.deadAfter/jobs.DeadAfterHeartbeats {
		what := ""
		if !isSet(fs, "dead-after") {
			what = " (the default)"
		}
		return Usagef("--dead-after is %s%s; it must be at least %d × --heartbeat (%s), or live processes are presumed dead between heartbeats and their jobs run twice",
			*b.deadAfter, what, jobs.DeadAfterHeartbeats, *b.heartbeat)
	}
	return nil
}

// isSet reports whether the command line set the flag name.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// configFlag adds --config to fs.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "", "JSON file of recurring tasks and maintenance schedules (see docs/recurring.md)")
}

// dispatcher builds the app's dispatcher: its tasks declared in code and
// those of the config file, if any.
func (e *Env) dispatcher(s *store.Store, configPath string, cfg dispatcher.Config) (*dispatcher.Dispatcher, error) {
	cfg.Tasks = append(cfg.Tasks, e.App.Tasks...)
	if configPath != "" {
		f, err := os.Open(configPath)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		fc, err := dispatcher.LoadConfig(f, e.App.Registry)
		if err != nil {
			return nil, err
		}
		cfg.Tasks = append(cfg.Tasks, fc.Tasks...)
		cfg.Maintenance = fc.Maintenance
	}
	if len(cfg.Tasks) > 0 {
		if e.App.Registry == nil {
			return nil, errors.New("recurring tasks need the app's registry (cli.App.Registry) to enqueue their jobs")
		}
		cfg.Client = jobs.NewClient(s, e.App.Registry, jobs.ClientConfig{})
	}
	return dispatcher.New(s, cfg)
}

func runRecurring(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("recurring", "recurring [--config FILE] [--json] [flags]")
	config := configFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	s, err := env.open(ctx, fs, url, args)
	if err != nil {
		return err
	}
	defer s.Close()
	d, err := env.dispatcher(s, *config, dispatcher.Config{})
	if err != nil {
		return err
	}
	tasks, err := d.Tasks(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]map[string]any, len(tasks))
		for i, t := range tasks {
			out[i] = map[string]any{"key": t.Key, "schedule": t.Schedule, "kind": t.Kind, "next": t.Next}
			if !t.Last.RunAt.IsZero() {
				out[i]["last"] = t.Last.RunAt
				out[i]["last_job_id"] = t.Last.JobID
			}
		}
		return printJSON(env, out)
	}
	now := time.Now()
	rows := make([][]string, len(tasks))
	for i, t := range tasks {
		kind, last := t.Kind, "-"
		if kind == "" {
			kind = "(built in)"
		}
		if !t.Last.RunAt.IsZero() {
			last = fmtIn(t.Last.RunAt, now)
		}
		rows[i] = []string{t.Key, t.Schedule, kind, last, fmtIn(t.Next, now)}
	}
	return table(env, "TASK\tSCHEDULE\tKIND\tLAST RUN\tNEXT RUN", rows)
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
func fmtIn(t, now time.Time) string { return human.In(t, now) }
