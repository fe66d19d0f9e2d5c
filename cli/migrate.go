package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/sluicequeue/sluice/store"
	"github.com/sluicequeue/sluice/store/dburl"
)

func runMigrate(ctx context.Context, env *Env, args []string) error {
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
	fs, url := env.FlagSet("migrate "+verb, "migrate up|down|status [flags]")
	steps := fs.Int("steps", 1, "with down: how many migrations to revert")
	to := fs.Int("to", 0, "with up: stop after this version (0: the newest)")
	if err := Parse(fs, rest); err != nil {
		return err
	}
	s, err := Open(ctx, *url)
	if err != nil {
		return err
	}
	defer s.Close()
	switch verb {
	case "up":
		done, err := s.MigrateUp(ctx, *to)
		for _, m := range done {
			fmt.Fprintf(env.Stdout, "applied %03d_%s\n", m.Version, m.Name)
		}
		if err == nil && len(done) == 0 {
			fmt.Fprintln(env.Stdout, "up to date")
		}
		return err
	case "down":
		if *steps < 1 {
			return Usagef("--steps must be at least 1")
		}
		done, err := s.MigrateDown(ctx, *steps)
		for _, m := range done {
			fmt.Fprintf(env.Stdout, "reverted %03d_%s\n", m.Version, m.Name)
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
		state := "pending"
		if m.Applied {
			state = "applied"
		}
		fmt.Fprintf(tw, "%03d\t%s\t%s\n", m.Version, m.Name, state)
	}
	return tw.Flush()
}

// migrateSQL prints a dialect's migrations for teams that run their own
// migration tool.
func migrateSQL(env *Env, args []string) error {
	fs, _ := env.FlagSet("migrate sql", "migrate sql --dialect postgres|mysql|sqlite [--down]")
	dialect := fs.String("dialect", "", "postgres, mysql or sqlite (required)")
	down := fs.Bool("down", false, "print the down migrations, newest first")
	if err := Parse(fs, args); err != nil {
		return err
	}
	if *dialect == "" {
		return Usagef("--dialect is required: postgres, mysql or sqlite")
	}
	d, err := dburl.Dialect(*dialect)
	if err != nil {
		return Usagef("%v", err)
	}
	ms, err := store.LoadMigrations(d.Migrations())
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "-- sluice schema for %s. sluice checks sluice_migrations for the versions applied.\n%s;\n\n",
		d.Name(), d.CreateMigrationsTable())
	for i := range ms {
		m := ms[i]
		body := m.Up
		if *down {
			m = ms[len(ms)-1-i]
			body = m.Down
		}
		fmt.Fprintf(env.Stdout, "-- %03d_%s (%s)\n%s\n", m.Version, m.Name, map[bool]string{false: "up", true: "down"}[*down], strings.TrimSpace(body))
		if !*down {
			fmt.Fprintf(env.Stdout, "INSERT INTO sluice_migrations (version, name, applied_at) VALUES (%d, '%s', 0);\n", m.Version, m.Name)
		} else {
			fmt.Fprintf(env.Stdout, "DELETE FROM sluice_migrations WHERE version = %d;\n", m.Version)
		}
		fmt.Fprintln(env.Stdout)
	}
	return nil
}
