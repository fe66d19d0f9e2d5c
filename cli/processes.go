package cli

import (
	"context"
	"github.com/sluicequeue/sluice/internal/human"
	"strconv"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// processes lists the registered processes, their heartbeats' ages read
// on the database's clock, on which they stamp them by default.
func processes(ctx context.Context, s *engine.Store) ([]engine.ProcessInfo, error) {
	return s.Processes(ctx, engine.DatabaseTime(time.Now))
}

// live reports whether a process heartbeated within jobs.DefaultDeadAfter:
// past that, any process may presume it dead.
func live(p engine.ProcessInfo) bool { return p.Age < jobs.DefaultDeadAfter }

// liveCounts counts the live workers and dispatchers.
func liveCounts(ps []engine.ProcessInfo) (workers, dispatchers int) {
	for _, p := range ps {
		if !live(p) {
			continue
		}
		switch p.Kind {
		case "worker":
			workers++
		case "dispatcher":
			dispatchers++
		}
	}
	return workers, dispatchers
}

// noDispatcher is what stats say when no dispatcher heartbeated recently.
func (e *Env) noDispatcher() string {
	return "no dispatcher has heartbeated in the last " + human.Duration(jobs.DefaultDeadAfter) +
		": scheduled jobs (retries, jobs to run later, rate-limited jobs waiting for a slot) are not made ready; run `" +
		e.App.name() + " dispatcher`"
}

func runProcesses(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("processes", "processes [--json] [flags]")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if err := Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("processes takes no arguments, got %q", fs.Arg(0))
	}
	s, err := env.openEngine(ctx, url, true)
	if err != nil {
		return err
	}
	defer s.Close()
	ps, err := processes(ctx, s)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]map[string]any, len(ps))
		for i, p := range ps {
			out[i] = map[string]any{
				"id": p.ID, "kind": p.Kind, "name": p.Name, "host": p.Hostname, "pid": p.PID,
				"queues": splitList(p.Queues), "started_at": engine.FromMicros(p.StartedAt),
				"heartbeat_at": engine.FromMicros(p.HeartbeatAt), "heartbeat_age_seconds": p.Age.Seconds(),
				"live": live(p), "jobs_running": p.Running,
			}
		}
		return printJSON(env, out)
	}
	now := time.Now()
	rows := make([][]string, len(ps))
	for i, p := range ps {
		queues, state := p.Queues, "live"
		if queues == "" {
			queues = "-"
		}
		if !live(p) {
			state = "presumed dead"
		}
		// Started is shown on the host's clock, the heartbeat's age on
		// the clock that stamped it.
		rows[i] = []string{strconv.FormatInt(p.ID, 10), p.Kind, p.Name, p.Hostname, strconv.Itoa(p.PID), queues,
			fmtIn(engine.FromMicros(p.StartedAt), now), human.Duration(p.Age) + " ago", strconv.Itoa(p.Running), state}
	}
	return table(env, "ID\tKIND\tNAME\tHOST\tPID\tQUEUES\tSTARTED\tHEARTBEAT\tRUNNING\tSTATE", rows)
}
