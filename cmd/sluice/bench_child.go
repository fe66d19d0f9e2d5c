package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

// benchWorkerCmd is the hidden command `sluice bench --procs N` starts N
// times: one worker over the bench kinds, reporting what its handlers saw
// on stdout. It is not listed in the help.
const benchWorkerCmd = "bench-worker"

// benchWorkerCommand is the hidden command, added only when it is the one
// asked for.
func benchWorkerCommand() []cli.Command {
	if len(os.Args) > 1 && os.Args[1] == benchWorkerCmd {
		return []cli.Command{{Name: benchWorkerCmd, Summary: "(internal) one worker of sluice bench --procs", Run: runBenchWorker}}
	}
	return nil
}

func runBenchWorker(ctx context.Context, env *cli.Env, args []string) error {
	fs, url := env.FlagSet(benchWorkerCmd, benchWorkerCmd+" [flags]: one worker of `sluice bench --procs N`; it stops on SIGTERM or when stdin closes")
	var kc kindsConfig
	concurrency := fs.Int("concurrency", 1000, "jobs the worker runs at once")
	name := fs.String("name", benchWorkerCmd, "the worker's process name")
	deleteDone := fs.Bool("delete", false, "delete jobs as they complete")
	fs.StringVar(&kc.rate, "rate", "", "bench_limited's limit, N/PER")
	fs.IntVar(&kc.burst, "burst", 1, "with --rate: the burst")
	fs.StringVar(&kc.floodRate, "flood-rate", "", "bench_flood's limit, N/PER, burst 1")
	fs.StringVar(&kc.lightRate, "light-rate", "", "bench_stamp's limit, N/PER, burst N, per budget")
	fs.BoolVar(&kc.fair, "fair", false, "declare bench_fair with its fairness key")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	var opts []store.Option
	if *deleteDone {
		opts = append(opts, store.DeleteOnComplete())
	}
	s, err := store.Open(ctx, *url, opts...)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }() // the bench is gone
	t := newTally()
	reg := jobs.NewRegistry()
	if err := registerKinds(reg, kc, t); err != nil {
		return err
	}
	w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{
		Queues: []string{benchQueue}, Concurrency: *concurrency, Name: *name, Hooks: t.hooks(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	r := &reporter{w: bufio.NewWriter(env.Stdout), t: t}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.loop(done) }()
	err = w.Run(ctx)
	close(done)
	wg.Wait()
	return err
}

// reporter writes a tally's changes as the lines procs.readReports reads.
type reporter struct {
	w    *bufio.Writer
	t    *tally
	last [nKinds][3]int64
	sent int // latency samples written
}

// loop reports every 10 ms, and once more when done closes.
func (r *reporter) loop(done <-chan struct{}) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			r.report()
			return
		case <-tick.C:
			r.report()
		}
	}
}

func (r *reporter) report() {
	for k := kind(0); k < nKinds; k++ {
		ran, def, parked := r.t.ran[k].Load(), r.t.deferred[k].Load(), r.t.parked[k].Load()
		if ran != r.last[k][0] {
			fmt.Fprintf(r.w, "ran %d %d\n", k, ran)
		}
		if def != r.last[k][1] || parked != r.last[k][2] {
			fmt.Fprintf(r.w, "def %d %d %d\n", k, def, parked)
		}
		r.last[k] = [3]int64{ran, def, parked}
	}
	lat := r.t.latencies()
	for _, s := range lat[r.sent:] {
		fmt.Fprintf(r.w, "lat %d %d\n", s.at, int64(s.d))
	}
	r.sent = len(lat)
	_ = r.w.Flush()
}
