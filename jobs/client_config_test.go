package jobs_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

type clientConfigJob struct{ S string }

func (clientConfigJob) Kind() string { return "client_config" }

// docs/operations.md: "Negative durations and counts are refused, naming
// the flag (or field) … In the Go API a zero setting means the default."
// A negative ClientConfig.MaxArgsBytes was silently the default; now every
// enqueue (and Client.Check) fails naming the field, and writes nothing.
// Zero is the default, 1 MiB.
func TestANegativeMaxArgsBytesIsRefusedNamingTheField(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[clientConfigJob](reg))
		c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{MaxArgsBytes: -1})
		_, err := c.Enqueue(ctx, clientConfigJob{S: "x"})
		require.ErrorContains(t, err, "ClientConfig.MaxArgsBytes is -1")
		_, err = c.EnqueueMany(ctx, []jobs.Item{{Args: clientConfigJob{S: "x"}}})
		require.ErrorContains(t, err, "MaxArgsBytes")
		require.ErrorContains(t, c.Check(jobs.Item{Args: clientConfigJob{S: "x"}}), "MaxArgsBytes")
		require.Zero(t, countAllJobs(t, s))

		// Both faults are named at once.
		both := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{MaxArgsBytes: -5, Middleware: []jobs.EnqueueMiddleware{nil}})
		err = both.Check(jobs.Item{Args: clientConfigJob{}})
		require.ErrorContains(t, err, "MaxArgsBytes is -5")
		require.ErrorContains(t, err, "ClientConfig.Middleware 0 is nil")

		// 0 is the default, 1 MiB.
		def := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{})
		_, err = def.Enqueue(ctx, clientConfigJob{S: strings.Repeat("x", 1000)})
		require.NoError(t, err)
		_, err = def.Enqueue(ctx, clientConfigJob{S: strings.Repeat("x", jobs.DefaultMaxArgsBytes)})
		require.ErrorIs(t, err, jobs.ErrArgsTooLarge)
	})
}
