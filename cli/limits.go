package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

func runLimits(ctx context.Context, env *Env, args []string) error {
	verb := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		verb, args = args[0], args[1:]
	}
	fs, url := env.FlagSet("limits "+verb, "limits [list | set TARGET --to N --per D [--burst B] | clear TARGET] [flags]")
	to := fs.Int("to", -1, "with set: how many jobs any window of --per admits (0 pauses)")
	per := fs.Duration("per", 0, "with set: the window")
	burst := fs.Int("burst", 1, "with set: how many a quiet budget admits at once")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if err := Parse(fs, args); err != nil {
		return err
	}
	switch verb {
	case "set":
		if fs.NArg() != 1 {
			return Usagef("set takes one target: a budget key (Stripe/Account/7) or a scope (Stripe)")
		}
		if *to < 0 || *per <= 0 {
			return Usagef("set needs --to and --per")
		}
	case "clear":
		if fs.NArg() != 1 {
			return Usagef("clear takes one target")
		}
	case "list":
		if fs.NArg() > 0 {
			return Usagef("limits list takes no arguments, got %q", strings.Join(fs.Args(), " "))
		}
	default:
		return Usagef("unknown limits action %q: use list, set or clear", verb)
	}
	s, err := env.openEngine(ctx, url, true)
	if err != nil {
		return err
	}
	defer s.Close()
	switch verb {
	case "set":
		if err := s.SetOverride(ctx, engine.Override{Target: fs.Arg(0), To: *to, Per: *per, Burst: *burst}, time.Now()); err != nil {
			return err
		}
		// Print what was stored: the store fills in defaults (burst 0 is 1)
		// and keeps the window to the microsecond.
		o, err := storedOverride(ctx, s, fs.Arg(0))
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "%s: %d per %s, burst %d (workers apply it within seconds)\n", o.Target, o.To, o.Per, o.Burst)
		return nil
	case "clear":
		if err := s.ClearOverride(ctx, fs.Arg(0)); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "%s: the declared limit applies again\n", fs.Arg(0))
		return nil
	}
	list, err := s.ListOverrides(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]map[string]any, len(list))
		for i, o := range list {
			out[i] = map[string]any{"target": o.Target, "to": o.To, "per": o.Per.String(), "burst": o.Burst, "updated_at": o.UpdatedAt}
		}
		return printJSON(env, out)
	}
	rows := make([][]string, len(list))
	for i, o := range list {
		rows[i] = []string{o.Target, strconv.Itoa(o.To), o.Per.String(), strconv.Itoa(o.Burst), fmtIn(o.UpdatedAt, time.Now())}
	}
	return table(env, "TARGET\tTO\tPER\tBURST\tSET", rows)
}

// storedOverride reads back the override of target.
func storedOverride(ctx context.Context, s *engine.Store, target string) (engine.Override, error) {
	list, err := s.ListOverrides(ctx)
	if err != nil {
		return engine.Override{}, fmt.Errorf("the override is set, but reading it back failed: %w", err)
	}
	for _, o := range list {
		if o.Target == target {
			return o, nil
		}
	}
	return engine.Override{}, fmt.Errorf("the override of %s is set, but was gone when read back (cleared meanwhile?)", target)
}

// errFindings makes check exit non-zero.
var errFindings = errors.New("check found problems")

func runCheck(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("check", "check [--strict] [flags]")
	strict := fs.Bool("strict", false, "fail on warnings too")
	if err := Parse(fs, args); err != nil {
		return err
	}
	if err := noMoreArgs(fs, 0); err != nil {
		return err
	}
	s, err := env.Open(ctx, url, false)
	if err != nil {
		return err
	}
	defer s.Close()
	reg := env.App.Registry
	if reg == nil {
		reg = jobs.NewRegistry()
	}
	findings, err := jobs.Check(ctx, reg, s)
	if err != nil {
		return err
	}
	errs, warns := 0, 0
	for _, f := range findings {
		fmt.Fprintln(env.Stdout, f)
		if f.Severity == jobs.SeverityError {
			errs++
		} else {
			warns++
		}
	}
	fmt.Fprintf(env.Stdout, "%d errors, %d warnings\n", errs, warns)
	if errs > 0 || *strict && warns > 0 {
		return fmt.Errorf("%w: %d errors, %d warnings", errFindings, errs, warns)
	}
	return nil
}
