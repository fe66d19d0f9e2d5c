package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/sluicequeue/sluice/cli"
)

// The bench, its worker processes and the demo open the database
// --database-url (or $SLUICE_DATABASE_URL) names with store.Open: a
// PostgreSQL keyword/value connection string was taken for a SQLite file
// path there too, and the bench ran against a new file of that name. It
// is refused, without the password, and nothing is created.
func TestBenchAndDemoRefuseAKeywordValueConnectionString(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	const dsn = "host=localhost user=app password=s3cret-pw dbname=jobs"
	app := &cli.App{Name: "sluice", Commands: []cli.Command{
		{Name: "demo", Run: runDemo},
		{Name: "bench", Run: runBench},
		{Name: benchWorkerCmd, Run: runBenchWorker},
	}}
	for _, args := range [][]string{
		{"bench", "--jobs", "1", "--database-url", dsn},
		{"demo", "--database-url", dsn},
		{benchWorkerCmd, "--database-url", dsn},
	} {
		var out bytes.Buffer
		app.Stdout, app.Stderr = &out, &out
		code := app.Run(context.Background(), args)
		if code != 1 || !strings.Contains(out.String(), "looks like a keyword/value connection string") {
			t.Errorf("%v: exit %d, output %q; want 1 and the keyword/value error", args[0], code, out.String())
		}
		if strings.Contains(out.String(), "s3cret") {
			t.Errorf("%v: the password is shown: %q", args[0], out.String())
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
