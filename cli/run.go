package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/sluicequeue/sluice/internal/human"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

// logFlags are a process's --log-level and --log-format.
type logFlags struct{ level, format *string }

// logFlag adds --log-level and --log-format to fs.
func logFlag(fs *flag.FlagSet) logFlags {
	return logFlags{
		level:  fs.String("log-level", "info", "log level: debug, info, warn or error"),
		format: fs.String("log-format", "text", "log format: text or json (slog's handlers)"),
	}
}

// logger returns base when the app gave one, else a logger on stderr as
// the flags say.
func (e *Env) logger(f logFlags, base *slog.Logger) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(*f.level)); err != nil {
		return nil, Usagef("--log-level %q: use debug, info, warn or error", *f.level)
	}
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler
	switch *f.format {
	case "text":
		h = slog.NewTextHandler(lockedWriter{e}, opts)
	case "json":
		h = slog.NewJSONHandler(lockedWriter{e}, opts)
	default:
		return nil, Usagef("--log-format %q: use text or json", *f.format)
	}
	if base != nil {
		return base, nil
	}
	return slog.New(h), nil
}

// lockedWriter writes to the env's stderr under the lock Notef takes.
type lockedWriter struct{ e *Env }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.e.stderrMu.Lock()
	defer w.e.stderrMu.Unlock()
	return w.e.Stderr.Write(p)
}

// orDefault returns v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func runWorker(ctx context.Context, env *Env, args []string) error {
	base := env.App.Worker
	reg := env.App.Registry
	declared := reg.Queues()
	defQueues := strings.Join(base.Queues, ",")
	queuesHelp := "queues to claim from, in order, comma-separated"
	if defQueues == "" {
		defQueues = strings.Join(declared, ",")
		queuesHelp += " (default: the queues the app's kinds declare)"
	}
	fs, url := env.FlagSet("worker", "worker [--queues a,b] [--concurrency N] [--http-addr :8080] [flags]")
	queues := fs.String("queues", defQueues, queuesHelp)
	concurrency := decimalFlag(fs, "concurrency", orDefault(base.Concurrency, jobs.DefaultConcurrency), "`N` jobs run at once")
	poll := fs.Duration("poll-interval", orDefault(base.PollInterval, jobs.DefaultPollInterval), "how often an idle worker looks for jobs")
	jobTimeout := fs.Duration("job-timeout", orDefault(base.JobTimeout, jobs.DefaultJobTimeout), "bound on one run unless its kind sets one; negative for none")
	shutdown := fs.Duration("shutdown-timeout", orDefault(base.ShutdownTimeout, jobs.DefaultShutdownTimeout), "how long running jobs get to finish on SIGTERM")
	horizon := fs.Duration("horizon", orDefault(base.Horizon, engine.DefaultHorizon), "how far ahead rate-limit slots are handed out")
	maxRetryAfter := fs.Duration("max-retry-after", orDefault(base.MaxRetryAfter, jobs.DefaultMaxRetryAfter), "cap on the wait a handler's RetryAfter asks for")
	giveBackFor := fs.Duration("give-back-for", orDefault(base.GiveBackFor, jobs.DefaultGiveBackFor), "how long a job this worker cannot run (its kind has no handler here) is given back in a row, with no run between, for another worker before it fails")
	hostClock := fs.Bool("host-clock", base.HostClock, "decide rate limits on this host's clock instead of the database's")
	shadow := fs.Bool("shadow-limits", base.ShadowLimits, "run every rate limit in shadow mode: record would-defer decisions, run the jobs anyway")
	beat := beatFlags(fs, base.HeartbeatInterval, base.DeadAfter)
	logs := logFlag(fs)
	serve := serveFlags(fs, env.App.Metrics)
	if err := Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("worker takes no arguments, got %q; name queues with --queues", strings.Join(fs.Args(), " "))
	}
	if *concurrency < 1 || *concurrency > jobs.MaxConcurrency {
		return Usagef("--concurrency is %d; it must be from 1 to %d", *concurrency, jobs.MaxConcurrency)
	}
	if *poll < jobs.MinInterval {
		return Usagef("--poll-interval is %s; it must be at least %s", *poll, jobs.MinInterval)
	}
	if *shutdown <= 0 {
		return Usagef("--shutdown-timeout is %s; it must be positive", *shutdown)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"--horizon", *horizon}, {"--max-retry-after", *maxRetryAfter}, {"--give-back-for", *giveBackFor}} {
		if f.d <= 0 {
			return Usagef("%s is %s; it must be positive", f.name, f.d)
		}
	}
	if err := beat.check(fs); err != nil {
		return err
	}
	qs, err := queueNames(*queues)
	if err != nil {
		return err
	}
	if len(qs) == 0 && !isSet(fs, "queues") {
		return Usagef("the app registers no kind with a handler, so there is no queue to claim by default: name the queues with --queues")
	}
	if len(qs) == 0 {
		return Usagef("--queues is empty")
	}
	for _, q := range qs {
		if err := engine.CheckQueue("queue", q); err != nil {
			return Usagef("--queues: %v", err)
		}
	}
	log, err := env.logger(logs, base.Logger)
	if err != nil {
		return err
	}
	if missed := unworked(reg, declared, qs); len(missed) > 0 {
		log.Warn("sluice: this worker does not claim every queue the app's kinds declare; their jobs wait for a worker that does",
			"not_claimed", strings.Join(missed, "; "), "queues", strings.Join(qs, ","))
	}
	s, err := env.Open(ctx, url, true)
	if err != nil {
		return err
	}
	defer s.Close()
	cfg := base
	cfg.Queues, cfg.Concurrency, cfg.PollInterval, cfg.JobTimeout = qs, *concurrency, *poll, *jobTimeout
	cfg.ShutdownTimeout, cfg.Horizon, cfg.MaxRetryAfter, cfg.GiveBackFor = *shutdown, *horizon, *maxRetryAfter, *giveBackFor
	cfg.HostClock, cfg.ShadowLimits, cfg.Logger = *hostClock, *shadow, log
	cfg.HeartbeatInterval, cfg.DeadAfter = *beat.heartbeat, *beat.deadAfter
	m, err := serve.metrics(env, s, log)
	if err != nil {
		return err
	}
	if m != nil {
		cfg.Hooks = cfg.Hooks.Join(m.Hooks())
	}
	w, err := jobs.NewWorker(s, reg, cfg)
	if err != nil {
		return err
	}
	return serve.run(ctx, env, s, log, health{pid: w.ProcessID, clock: storeClock(cfg.HostClock, cfg.Clock), interval: cfg.HeartbeatInterval}, w.Run)
}

// unworked names the queues the registry's kinds declare that qs leaves
// out, each with its kinds: "stripe (sync_account)".
func unworked(reg *jobs.Registry, declared, qs []string) []string {
	var out []string
	for _, q := range declared {
		if !slices.Contains(qs, q) {
			out = append(out, fmt.Sprintf("%s (%s)", q, strings.Join(reg.KindsOf(q), ", ")))
		}
	}
	return out
}

func runDispatcher(ctx context.Context, env *Env, args []string) error {
	base := env.App.Dispatcher
	fs, url := env.FlagSet("dispatcher", "dispatcher [--interval 1s] [--batch-size 500] [--config FILE] [--http-addr :8081] [flags]")
	interval := fs.Duration("interval", orDefault(base.Interval, dispatcher.DefaultInterval), "how often to look for due jobs")
	batch := decimalFlag(fs, "batch-size", orDefault(base.BatchSize, dispatcher.DefaultBatchSize), "`N` jobs one promotion moves")
	horizon := fs.Duration("horizon", orDefault(base.Horizon, engine.DefaultHorizon), "how far ahead parked jobs get rate-limit slots")
	config := configFlag(fs)
	beat := beatFlags(fs, base.HeartbeatInterval, base.DeadAfter)
	logs := logFlag(fs)
	serve := serveFlags(fs, env.App.Metrics)
	if err := Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("dispatcher takes no arguments, got %q", strings.Join(fs.Args(), " "))
	}
	if *batch < 1 || *batch > dispatcher.MaxBatchSize {
		return Usagef("--batch-size is %d; it must be from 1 to %d", *batch, dispatcher.MaxBatchSize)
	}
	if *interval < jobs.MinInterval {
		return Usagef("--interval is %s; it must be at least %s", *interval, jobs.MinInterval)
	}
	if *horizon <= 0 {
		return Usagef("--horizon is %s; it must be positive", *horizon)
	}
	if err := beat.check(fs); err != nil {
		return err
	}
	log, err := env.logger(logs, base.Logger)
	if err != nil {
		return err
	}
	s, err := env.Open(ctx, url, true)
	if err != nil {
		return err
	}
	defer s.Close()
	cfg := base
	cfg.Interval, cfg.BatchSize, cfg.Horizon, cfg.Logger = *interval, *batch, *horizon, log
	cfg.HeartbeatInterval, cfg.DeadAfter = *beat.heartbeat, *beat.deadAfter
	if _, err := serve.metrics(env, s, log); err != nil {
		return err
	}
	d, err := env.dispatcher(s, *config, cfg, false)
	if err != nil {
		return err
	}
	return serve.run(ctx, env, s, log, health{pid: d.ProcessID, clock: storeClock(cfg.HostClock, cfg.Clock), interval: cfg.HeartbeatInterval}, d.Run)
}

// storeClock is the clock a worker or dispatcher stamps its heartbeats
// on, as they decide it.
func storeClock(host bool, c clock.Clock) engine.Clock {
	if !host && clock.IsSystem(c) {
		return engine.DatabaseTime(time.Now)
	}
	return engine.HostTime(clock.OrSystem(c).Now)
}

// beats are a process's --heartbeat and --dead-after.
type beats struct{ heartbeat, deadAfter *time.Duration }

// beatFlags adds --heartbeat and --dead-after to fs, with defaults from
// the app's configuration where it sets them.
func beatFlags(fs *flag.FlagSet, heartbeat, deadAfter time.Duration) beats {
	return beats{
		heartbeat: fs.Duration("heartbeat", orDefault(heartbeat, jobs.DefaultHeartbeatInterval),
			"how often this process stamps its row in sluice_processes and looks for dead processes"),
		deadAfter: fs.Duration("dead-after", orDefault(deadAfter, jobs.DefaultDeadAfter),
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
// those of the config file, if any. One built for listing keeps the file's
// tasks whose kinds the program does not know; it must not run.
func (e *Env) dispatcher(s *store.Store, configPath string, cfg dispatcher.Config, listing bool) (*dispatcher.Dispatcher, error) {
	cfg.Tasks = append(append([]dispatcher.Task(nil), cfg.Tasks...), e.App.Tasks...)
	if configPath != "" {
		f, err := os.Open(configPath)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		load := dispatcher.LoadConfig
		if listing {
			load = dispatcher.LoadConfigToList
		}
		fc, err := load(f, e.App.Registry)
		if err != nil {
			return nil, err
		}
		cfg.Tasks = append(cfg.Tasks, fc.Tasks...)
		cfg.Maintenance = fc.Maintenance
	}
	if len(cfg.Tasks) > 0 && listing && e.App.Registry == nil {
		cfg.Client = jobs.NewClient(s, jobs.NewRegistry(), jobs.ClientConfig{})
	} else if len(cfg.Tasks) > 0 && cfg.Client == nil {
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
	if err := Parse(fs, args); err != nil {
		return err
	}
	if err := noMoreArgs(fs, 0); err != nil {
		return err
	}
	s, err := env.Open(ctx, url, true)
	if err != nil {
		return err
	}
	defer s.Close()
	d, err := env.dispatcher(s, *config, env.App.Dispatcher, true)
	if err != nil {
		return err
	}
	tasks, err := d.Tasks(ctx)
	if err != nil {
		return err
	}
	known := env.App.Registry.Kinds()
	unknown := func(kind string) bool { return kind != "" && !slices.Contains(known, kind) }
	if *asJSON {
		out := make([]map[string]any, len(tasks))
		for i, t := range tasks {
			var kind, lastJob any
			if t.Kind != "" {
				kind = t.Kind
			}
			if !t.Last.RunAt.IsZero() {
				lastJob = t.Last.JobID
			}
			out[i] = map[string]any{"key": t.Key, "schedule": t.Schedule, "kind": kind, "built_in": t.Kind == "",
				"kind_registered": !unknown(t.Kind), "enabled": t.Enabled, "next": jsonTime(t.Next), "last": jsonTime(t.Last.RunAt), "last_job_id": lastJob}
		}
		return printJSON(env, out)
	}
	now := time.Now()
	rows := make([][]string, len(tasks))
	for i, t := range tasks {
		kind, last := t.Kind, "-"
		switch {
		case kind == "":
			kind = "(built in)"
		case unknown(kind):
			kind += " (not registered in " + env.App.name() + ": run its dispatcher from the app)"
		}
		if !t.Last.RunAt.IsZero() {
			last = fmtIn(t.Last.RunAt, now)
		}
		next := fmtIn(t.Next, now)
		if !t.Enabled {
			next = "off"
		}
		rows[i] = []string{t.Key, t.Schedule, kind, last, next}
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

// queueNames splits --queues at its commas, each name as written: an
// empty name ("a,,b", a comma at an end) or one with spaces around it
// ("a ,b") is refused, naming the flag, as a typo rather than trimmed
// into a list the operator did not write.
func queueNames(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	names := strings.Split(s, ",")
	for _, n := range names {
		switch {
		case n == "":
			return nil, Usagef("--queues %q holds an empty queue name (two commas in a row, or one at an end)", s)
		case strings.TrimSpace(n) != n:
			return nil, Usagef("--queues %q: queue name %q has spaces around it; separate the names by commas alone (--queues %s)", s, n, strings.Join(splitList(s), ","))
		}
	}
	return names, nil
}

// fmtIn prints how far t is from now, rounded for people: "in 3s",
// "3m44s ago", or "now".
func fmtIn(t, now time.Time) string { return human.In(t, now) }
