package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/human"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

func runLimits(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("limits", "limits [list | set TARGET --to N --per D [--burst B] | clear TARGET] [flags]")
	to := decimalFlag(fs, "to", -1, "with set: `N` jobs any window of --per admits (0 pauses)")
	per := fs.Duration("per", 0, "with set: the window, a whole number of microseconds up to 100 years")
	burst := decimalFlag(fs, "burst", 1, "with set: `N` a quiet budget admits at once, 1 to --to (0 means 1)")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	verb, rest, err := parseVerb(fs, args, "list", "list", "set", "clear")
	if err != nil {
		return err
	}
	set := setFlags(fs)
	target := ""
	switch verb {
	case "set":
		if len(rest) != 1 {
			return Usagef("set takes one target: a budget key (Stripe/Account/7) or a scope (Stripe)")
		}
		target = rest[0]
		if err := checkOverrideFlags(target, *to, *per, *burst, set); err != nil {
			return err
		}
	case "clear":
		if len(rest) != 1 {
			return Usagef("clear takes one target")
		}
		target = rest[0]
		if err := checkTarget(target); err != nil {
			return err
		}
	case "list":
		if len(rest) > 0 {
			return Usagef("limits list takes no arguments, got %q", strings.Join(rest, " "))
		}
	}
	if verb != "set" {
		for _, name := range []string{"to", "per", "burst"} {
			if set[name] {
				return Usagef("--%s goes with limits set, not limits %s", name, verb)
			}
		}
	}
	s, err := env.openEngine(ctx, url, true)
	if err != nil {
		return err
	}
	defer s.Close()
	switch verb {
	case "set":
		if err := s.SetOverride(ctx, engine.Override{Target: target, To: *to, Per: *per, Burst: *burst}, time.Now()); err != nil {
			return err
		}
		// Print what was stored: the store fills in defaults (burst 0 is 1)
		// and keeps the window to the microsecond.
		o, err := storedOverride(ctx, s, target)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env, overrideJSON(o))
		}
		fmt.Fprintf(env.Stdout, "%s: %d per %s, burst %d (workers apply it within seconds)\n", o.Target, o.To, o.Per, o.Burst)
		return nil
	case "clear":
		if err := s.ClearOverride(ctx, target); err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env, map[string]any{"target": target, "cleared": true})
		}
		fmt.Fprintf(env.Stdout, "%s: the declared limit applies again\n", target)
		return nil
	}
	list, err := s.ListOverrides(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]map[string]any, len(list))
		for i, o := range list {
			out[i] = overrideJSON(o)
		}
		return printJSON(env, out)
	}
	rows := make([][]string, len(list))
	for i, o := range list {
		rows[i] = []string{o.Target, strconv.Itoa(o.To), o.Per.String(), strconv.Itoa(o.Burst), fmtIn(o.UpdatedAt, time.Now())}
	}
	return table(env, "TARGET\tTO\tPER\tBURST\tSET", rows)
}

// overrideJSON is an override as limits --json prints it, listed or set.
func overrideJSON(o engine.Override) map[string]any {
	return map[string]any{"target": o.Target, "to": o.To, "per": o.Per.String(), "burst": o.Burst, "updated_at": o.UpdatedAt}
}

// setFlags returns the names of the flags the command line set.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// checkOverrideFlags checks limits set's target and numbers before the
// database is opened: each bad one is bad usage (exit 2), named by its
// flag. What is left to check of them together (the interval they make,
// the debt a burst may run up) is the store's check, as bad usage too.
func checkOverrideFlags(target string, to int, per time.Duration, burst int, set map[string]bool) error {
	if err := checkTarget(target); err != nil {
		return err
	}
	switch {
	case !set["to"] || !set["per"]:
		return Usagef("set needs --to N (0 pauses) and --per D, e.g. --to 100 --per 1m")
	case to < 0:
		return Usagef("--to is %d; it must be positive, or 0 to pause", to)
	case to > ratelimit.MaxTo:
		return Usagef("--to is %d; it may be at most %d", to, ratelimit.MaxTo)
	case per <= 0:
		return Usagef("--per is %s; it must be a positive duration", per)
	case per > ratelimit.MaxPer:
		return Usagef("--per is %s; it may be at most %s (100 years)", per, ratelimit.MaxPer)
	case per%time.Microsecond != 0:
		return Usagef("--per is %s; it must be a whole number of microseconds", per)
	case burst < 0:
		return Usagef("--burst is %d; it must be at least 1 (0 means 1)", burst)
	case to > 0 && burst > to:
		return Usagef("--burst is %d; it may be at most --to (%d)", burst, to)
	case burst > ratelimit.MaxTo:
		return Usagef("--burst is %d; it may be at most %d", burst, ratelimit.MaxTo)
	}
	if _, err := (engine.Override{Target: target, To: to, Per: per, Burst: burst}).Check(); err != nil {
		return Usagef("--to %d --per %s --burst %d: %v", to, per, burst, err)
	}
	return nil
}

// checkTarget refuses, as bad usage, an override's target that no budget
// or scope can have.
func checkTarget(target string) error {
	if err := engine.CheckKey("target", target); err != nil {
		return Usagef("%v; it must name a budget or a scope", err)
	}
	return nil
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
	s, err := env.openStore(ctx, url, false, false) // check reads: it creates no file
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
	if len(reg.Kinds()) == 0 {
		fmt.Fprintf(env.Stdout, "note: %s declares no kinds, so overrides are not checked against declarations; run your app's check for that\n", env.App.Name)
	}
	errs, warns := 0, 0
	for _, f := range findings {
		fmt.Fprintln(env.Stdout, human.Text(f.String()))
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
