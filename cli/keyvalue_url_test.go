package cli_test

import (
	"os"
	"strings"
	"testing"

	"github.com/sluicequeue/sluice/cli"
)

// A PostgreSQL keyword/value connection string given as the database,
// by --database-url or $SLUICE_DATABASE_URL, was taken for a SQLite file
// path: the command created that file in the working directory and, for
// migrate, printed its absolute path, password and all. It is refused,
// saying what it looks like and the URL to write, and nothing is created.
func TestKeywordValueDatabaseURLIsRefused(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	const dsn = "host=localhost user=app password=s3cret-pw dbname=jobs sslmode=disable"
	for _, byEnv := range []bool{false, true} {
		for _, args := range [][]string{{"stats"}, {"migrate", "up"}, {"migrate", "status"}, {"limits", "set", "Stripe", "--to", "5", "--per", "1s"}} {
			t.Setenv(cli.EnvDatabaseURL, "")
			if byEnv {
				t.Setenv(cli.EnvDatabaseURL, dsn)
			} else {
				args = append(args, "--database-url", dsn)
			}
			code, out, stderr := run(t, args...)
			if code != 1 || !strings.Contains(stderr, "looks like a keyword/value connection string") ||
				!strings.Contains(stderr, "postgres://user@host:5432/db") || !strings.Contains(stderr, "sqlite:PATH") {
				t.Errorf("%v (env %v): exit %d, stderr %q; want 1 and the keyword/value error", args, byEnv, code, stderr)
			}
			if strings.Contains(out+stderr, "s3cret") {
				t.Errorf("%v (env %v): the password is shown: stdout %q, stderr %q", args, byEnv, out, stderr)
			}
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("created %q", e.Name())
	}
}
