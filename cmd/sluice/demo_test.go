package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// The demo runs on the database --database-url names, in a queue of its
// own, and refuses to start while an earlier demo's jobs wait there.
func TestDemoRunsOnTheDatabaseItIsGiven(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			url := b.URL(t)
			var out, errOut bytes.Buffer
			app := &cli.App{Name: "sluice", Stdout: &out, Stderr: &errOut,
				Commands: []cli.Command{{Name: "demo", Run: runDemo}}}
			code := app.Run(context.Background(), []string{"demo", "--database-url", url})
			require.Equal(t, 0, code, "%s%s", out.String(), errOut.String())
			require.Contains(t, out.String(), "migrated; the demo's jobs go to queue sluice_demo")
			require.Contains(t, out.String(), "then 3 per second after that burst")
			require.Contains(t, out.String(), "send_email: 8 runs failed (smtp: 421 try again later) and were retried 1s later; 8 jobs then succeeded on a later attempt")

			s, err := testdb.OpenURL(context.Background(), url)
			require.NoError(t, err)
			defer s.Close()
			st, err := s.Stats(context.Background())
			require.NoError(t, err)
			require.Len(t, st, 1)
			require.Equal(t, demoQueue, st[0].Queue)
			require.EqualValues(t, 360, st[0].Counts[engine.StateCompleted])

			_, err = s.Enqueue(context.Background(), nil, engine.DatabaseTime(nil), []engine.NewJob{{Kind: "geocode", Queue: demoQueue, Args: []byte(`{}`), MaxAttempts: 1}})
			require.NoError(t, err)
			out.Reset()
			errOut.Reset()
			code = app.Run(context.Background(), []string{"demo", "--database-url", url})
			require.Equal(t, 1, code)
			require.Contains(t, errOut.String(), "queue sluice_demo holds 1 unfinished jobs of an earlier demo")
		})
	}
}
