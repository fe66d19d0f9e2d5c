package cli

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sluicequeue/sluice/internal/driver"
	"github.com/sluicequeue/sluice/internal/engine"
)

const migrateUsage = "migrate up [--to VERSION] | down [N] | status | sql --dialect D [--down] [--format F --out DIR]"

// migrateHelp prints migrate's help, as every command's -h does.
func migrateHelp(env *Env) {
	name := env.App.name()
	fmt.Fprintf(env.Stderr, "usage: %s %s\n\n"+
		"  up      apply the pending migrations (--to VERSION: stop after it)\n"+
		"  down N  revert the N newest applied migrations (default 1)\n"+
		"  status  list the migrations and whether each is applied (or partly, after a failure on MySQL)\n"+
		"  sql     print a dialect's migrations, or write them for goose, golang-migrate or atlas (--format, --out)\n\n",
		name, migrateUsage)
	fs, _ := env.FlagSet("migrate", migrateUsage)
	fs.SetOutput(env.Stderr)
	fmt.Fprintln(env.Stderr, "flags of up, down and status:")
	fs.PrintDefaults()
	fmt.Fprintf(env.Stderr, "\nRun %s migrate ACTION -h for an action's own flags.\n", name)
}

func runMigrate(ctx context.Context, env *Env, args []string) error {
	asksHelp := len(args) > 0 && args[0] == "help"
	if len(args) > 0 && strings.HasPrefix(args[0], "-") {
		for _, a := range args {
			asksHelp = asksHelp || a == "-h" || a == "-help" || a == "--help"
		}
	}
	if asksHelp {
		migrateHelp(env)
		return flag.ErrHelp
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return Usagef("say up, down, status or sql (e.g. %s migrate up)", env.App.name())
	}
	verb, rest := args[0], args[1:]
	switch verb {
	case "sql":
		return migrateSQL(env, rest)
	case "up", "down", "status":
	default:
		return Usagef("unknown migrate action %q: use up, down, status or sql", verb)
	}
	fs, url := env.FlagSet("migrate "+verb, map[string]string{
		"up":     "migrate up [--to VERSION] [flags]",
		"down":   "migrate down [N] [flags]",
		"status": "migrate status [flags]",
	}[verb])
	// --to and --steps are read in decimal, as N is: the flag package's
	// Int takes a leading 0 for octal, and versions are written 017.
	var stepsFlag, toFlag *string
	switch verb {
	case "up":
		toFlag = fs.String("to", "", "stop after this `VERSION` (0 or none: the newest)")
	case "down":
		stepsFlag = fs.String("steps", "", "how many migrations to revert, as `N` (default 1)")
	}
	if err := Parse(fs, rest); err != nil {
		return err
	}
	n, to := 0, 0
	switch {
	case verb == "up":
		var err error
		if to, err = upTarget(fs, *toFlag); err != nil {
			return err
		}
	case verb == "down":
		var err error
		if n, err = downCount(fs, *stepsFlag); err != nil {
			return err
		}
	case fs.NArg() > 0:
		return Usagef("migrate %s takes no arguments, got %q", verb, strings.Join(fs.Args(), " "))
	}
	// migrate names its database every time, on stdout: the notice of
	// the default is part of it.
	env.noticed = true
	what := "database " + DescribeURL(*url)
	switch {
	case env.App.OpenStore != nil:
		what += ", as " + env.App.name() + " opens it (cli.App.OpenStore)"
	case env.Defaulted(url):
		what += fmt.Sprintf(", the default (no --database-url or $%s given)", EnvDatabaseURL)
	}
	fmt.Fprintln(env.Stdout, what)
	// Only up writes a schema: status and down of a file that does not
	// exist say so rather than create it.
	pub, err := env.openStore(ctx, url, false, verb == "up")
	if err != nil {
		return err
	}
	s := engine.From(pub)
	defer s.Close()
	switch verb {
	case "up":
		ms, err := s.Migrations()
		if err != nil {
			return err
		}
		if err := engine.CheckTarget(ms, to); err != nil {
			return Usagef("--to %d: %v", to, err)
		}
		done, err := s.MigrateUp(ctx, to)
		for _, m := range done {
			fmt.Fprintf(env.Stdout, "applied %03d_%s\n", m.Version, m.Name)
		}
		if err == nil && len(done) == 0 {
			return upToDate(ctx, env, s, ms, to)
		}
		return err
	case "down":
		if err := checkDownCount(ctx, s, n); err != nil {
			return err
		}
		done, err := s.MigrateDown(ctx, n)
		for _, m := range done {
			fmt.Fprintf(env.Stdout, "reverted %03d_%s\n", m.Version, m.Name)
		}
		if err == nil && len(done) == 0 {
			fmt.Fprintln(env.Stdout, "nothing to revert")
		}
		return err
	}
	st, err := s.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tNAME\tSTATE")
	for _, m := range st {
		fmt.Fprintf(tw, "%03d\t%s\t%s\n", m.Version, m.Name, m.State())
	}
	newer, err := s.NewerMigrationStatus(ctx)
	if err != nil {
		return err
	}
	for _, m := range newer {
		fmt.Fprintf(tw, "%03d\t?\t%s\n", m.Version, m.State())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(newer) > 0 {
		ms, err := s.Migrations()
		if err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, newerNote(ms, newer))
	}
	return nil
}

// upToDate says that `migrate up` found nothing to apply up to to (0:
// the newest), and what is applied past it: migrations newer than this
// sluice knows, or, below the newest, this sluice's own past --to, which
// up never reverts.
func upToDate(ctx context.Context, env *Env, s *engine.Store, ms []engine.Migration, to int) error {
	newer, err := s.NewerMigrationStatus(ctx)
	if err != nil {
		return err
	}
	if len(newer) > 0 {
		fmt.Fprintf(env.Stdout, "up to date, and newer: %s\n", newerNote(ms, newer))
		return nil
	}
	var past []string
	if to > 0 {
		st, err := s.MigrationStatus(ctx)
		if err != nil {
			return err
		}
		for _, m := range st {
			if m.Version > to && (m.Applied || m.Partly != nil) {
				past = append(past, fmt.Sprintf("%03d", m.Version))
			}
		}
	}
	if len(past) == 0 {
		fmt.Fprintln(env.Stdout, "up to date")
		return nil
	}
	fmt.Fprintf(env.Stdout, "up to date to %03d, and past it: %s %s applied, which migrate up never reverts (migrate down %d takes the database back to %03d)\n",
		to, strings.Join(past, ", "), map[bool]string{true: "is", false: "are"}[len(past) == 1], len(past), to)
	return nil
}

// newerNote says that the database has migrations newer than this
// version of sluice knows, and what that means for it.
func newerNote(ms []engine.Migration, newer []engine.NewerMigration) string {
	latest := 0
	if len(ms) > 0 {
		latest = ms[len(ms)-1].Version
	}
	return fmt.Sprintf("the database has %s, newer than this sluice knows (its newest is %03d): "+
		"a newer sluice migrated it; this one runs beside it but reverts nothing (migrate down) until that sluice reverts %s",
		engine.NewerList(newer, false), latest, map[bool]string{true: "it", false: "them"}[len(newer) == 1])
}

// checkDownCount refuses to revert more migrations than are applied: a
// typo (down 99 for down 9) would otherwise revert them all, and drop every
// job with the first. It says how to revert them all, unless migrations
// newer than this sluice knows keep it from reverting any.
func checkDownCount(ctx context.Context, s *engine.Store, n int) error {
	st, err := s.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	applied := 0
	for _, m := range st {
		if m.Applied || m.Partly != nil {
			applied++
		}
	}
	if applied == 0 || n <= applied {
		return nil
	}
	newer, err := s.NewerMigrationStatus(ctx)
	if err != nil {
		return err
	}
	if len(newer) > 0 {
		// Saying down N would only be refused: nothing is reverted from
		// under a newer migration.
		them := map[bool]string{true: "it", false: "them"}[len(newer) == 1]
		return Usagef("migrate down %d: only %d migration(s) are applied, and the database has %s, newer than this sluice knows: "+
			"this one reverts nothing until the sluice that applied %s reverts %s", n, applied, engine.NewerList(newer, false), them, them)
	}
	return Usagef("migrate down %d: only %d migration(s) are applied; to revert them all, dropping sluice's tables and every job, say migrate down %d", n, applied, applied)
}

// upTarget is the version `migrate up` stops after: --to VERSION (raw,
// in decimal), else 0 for the newest.
func upTarget(fs *flag.FlagSet, raw string) (int, error) {
	to := 0
	if isSet(fs, "to") {
		var err error
		if to, err = strconv.Atoi(raw); err != nil {
			return 0, Usagef("--to %q is not a migration's version: give its number (--to 17 or --to 017), or 0 for the newest", raw)
		}
	}
	switch {
	case to < 0:
		return 0, Usagef("--to must be a migration's version (0 for the newest), got %d", to)
	case fs.NArg() > 0:
		return 0, Usagef("migrate up takes no arguments, got %q; to stop at a version, use --to VERSION", strings.Join(fs.Args(), " "))
	}
	return to, nil
}

// downCount is how many migrations `migrate down` reverts: its one
// argument N, or --steps N (steps, in decimal), else 1.
func downCount(fs *flag.FlagSet, steps string) (int, error) {
	stepsSet := isSet(fs, "steps")
	switch {
	case fs.NArg() > 1:
		return 0, Usagef("migrate down takes one number of migrations to revert, got %q", strings.Join(fs.Args(), " "))
	case fs.NArg() == 1 && stepsSet:
		return 0, Usagef("give the number of migrations once: migrate down N, or --steps N")
	case fs.NArg() == 1:
		n, err := strconv.Atoi(fs.Arg(0))
		if err != nil {
			return 0, Usagef("migrate down N: %q is not a number of migrations to revert", fs.Arg(0))
		}
		if n < 1 {
			return 0, Usagef("migrate down N: N is %d; it must be at least 1", n)
		}
		return n, nil
	case stepsSet:
		n, err := strconv.Atoi(steps)
		if err != nil {
			return 0, Usagef("--steps %q is not a number of migrations to revert", steps)
		}
		if n < 1 {
			return 0, Usagef("--steps is %d; it must be at least 1", n)
		}
		return n, nil
	}
	return 1, nil
}

// migrateSQL prints a dialect's migrations for teams that run their own
// migration tool, or writes them in a tool's layout (--format, --out).
func migrateSQL(env *Env, args []string) error {
	fs, _ := env.FlagSet("migrate sql", "migrate sql --dialect postgres|mysql|sqlite [--down] [--format goose|golang-migrate|atlas --out DIR]")
	dialect := fs.String("dialect", "", "postgres, mysql or sqlite (required)")
	down := fs.Bool("down", false, "print the down migrations, newest first (plain format only)")
	format := fs.String("format", "plain", "plain (one script on stdout), or a tool's layout of files per version: goose, golang-migrate or atlas")
	out := fs.String("out", "", "with --format goose|golang-migrate|atlas: the directory to write the files to (created if missing)")
	if err := Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("migrate sql takes no arguments, got %q; say the dialect with --dialect", strings.Join(fs.Args(), " "))
	}
	if *dialect == "" {
		return Usagef("--dialect is required: postgres, mysql or sqlite")
	}
	b, err := driver.ByName(*dialect)
	if err != nil {
		return Usagef("%v", err)
	}
	d := b.Dialect
	ms, err := engine.LoadMigrations(d.Migrations())
	if err != nil {
		return err
	}
	switch {
	case *format == "plain" && *out != "":
		return Usagef("--out writes a tool's files: say which with --format goose, golang-migrate or atlas")
	case *format == "plain":
		return printPlainSQL(env, d, ms, *down)
	case *out == "":
		return Usagef("--format %s writes files: say where with --out DIR", *format)
	case *down:
		return Usagef("--down is for the plain format: --format %s writes the down migrations too, where the tool has them", *format)
	}
	files, err := toolFiles(*format, d, ms, env.App.name())
	if err != nil {
		return err
	}
	return writeFiles(env, *out, files)
}

// printPlainSQL prints every migration as one script.
func printPlainSQL(env *Env, d engine.Dialect, ms []engine.Migration, down bool) error {
	fmt.Fprintf(env.Stdout, "-- sluice schema for %s. sluice checks sluice_migrations for the versions applied.\n%s;\n\n",
		d.Name(), engine.MustSQL(d).CreateMigrationsTable())
	for i := range ms {
		m := ms[i]
		body := m.Up
		if down {
			m = ms[len(ms)-1-i]
			body = m.Down
		}
		fmt.Fprintf(env.Stdout, "-- %03d_%s (%s)\n%s\n", m.Version, m.Name, map[bool]string{false: "up", true: "down"}[down], strings.TrimSpace(body))
		if !down {
			fmt.Fprintf(env.Stdout, "%s;\n", recordSQL(m))
		} else {
			fmt.Fprintf(env.Stdout, "%s;\n", forgetSQL(m))
		}
		fmt.Fprintln(env.Stdout)
	}
	return nil
}
