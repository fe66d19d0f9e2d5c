package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicequeue/sluice/internal/human"
	"github.com/sluicequeue/sluice/jobs"
)

func runExplain(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("explain", "explain ID [--json] [flags]")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if err := Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return Usagef("explain takes one job id")
	}
	ids, err := parseIDs(fs.Args())
	if err != nil {
		return err
	}
	s, err := env.Open(ctx, url, true)
	if err != nil {
		return err
	}
	defer s.Close()
	e, err := jobs.Explain(ctx, s, env.App.Registry, ids[0], time.Now())
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(env, e)
	}
	for _, l := range e.Lines() {
		// Stored text (an error, a deferral's reason) is shown escaped.
		fmt.Fprintln(env.Stdout, human.Text(l))
	}
	return nil
}
