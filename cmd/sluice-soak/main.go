//go:build soak

// Command sluice-soak runs workers and a dispatcher as real processes over
// one database, SIGKILLs them at random under a mixed load, and checks
// afterwards that nothing was lost and no limit was broken.
//
//	go run -tags soak ./cmd/sluice-soak run --url URL --for 4m
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sluice-soak run|worker|dispatcher")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch os.Args[1] {
	case "run":
		err = runSoak(ctx, os.Args[2:])
	case "worker", "dispatcher":
		err = child(ctx, os.Args[1], os.Args[2])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-soak:", err)
		os.Exit(1)
	}
}

// child runs one worker or dispatcher until SIGTERM or until stdin closes
// (the soak is gone).
func child(ctx context.Context, what, name string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	s, err := store.Open(ctx, os.Getenv("SOAK_URL"))
	if err != nil {
		return err
	}
	defer s.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if what == "dispatcher" {
		d, err := dispatcher.New(s, dispatcher.Config{
			Interval: 200 * time.Millisecond, HeartbeatInterval: heartbeat, DeadAfter: deadAfter,
			Horizon: horizon, Name: name, Logger: log,
		})
		if err != nil {
			return err
		}
		return d.Run(ctx)
	}
	reg := jobs.NewRegistry()
	if err := register(reg, newLogger(s, name)); err != nil {
		return err
	}
	w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{
		Concurrency: 8, PollInterval: 50 * time.Millisecond, HeartbeatInterval: heartbeat,
		DeadAfter: deadAfter, Horizon: horizon, Name: name, Logger: log, ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// flags are the soak's settings.
type flags struct {
	url        string
	dur, drain time.Duration
	workers    int
	dispatcher bool
	killEvery  time.Duration
	rate       float64 // load multiplier
	logDir     string
	seed       uint64
	stops      bool
}

func parseFlags(args []string) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.StringVar(&f.url, "url", "", "database URL")
	fs.DurationVar(&f.dur, "for", 4*time.Minute, "how long to kill processes")
	fs.DurationVar(&f.drain, "drain", 4*time.Minute, "how long to wait for the jobs to finish afterwards")
	fs.IntVar(&f.workers, "workers", 4, "worker processes")
	fs.BoolVar(&f.dispatcher, "dispatcher", true, "run a dispatcher process")
	fs.DurationVar(&f.killEvery, "kill-every", 4*time.Second, "mean time between kills")
	fs.Float64Var(&f.rate, "load", 1, "load multiplier")
	fs.StringVar(&f.logDir, "logs", "/tmp/soak-logs", "where the children's stderr goes")
	fs.BoolVar(&f.stops, "stops", false, "also SIGSTOP workers past DeadAfter now and then")
	fs.Uint64Var(&f.seed, "seed", uint64(time.Now().UnixNano()), "random seed")
	return f, fs.Parse(args)
}
