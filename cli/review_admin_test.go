package cli_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// reviewStore opens a fresh, migrated database of backend b and returns
// it with its --database-url flag.
func reviewStore(t *testing.T, b testdb.Backend) (*engine.Store, string) {
	t.Helper()
	url := b.URL(t)
	s, err := testdb.OpenURL(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	_, err = s.MigrateUp(context.Background(), 0)
	require.NoError(t, err)
	return s, "--database-url=" + url
}

// `sluice retry ID` says what the job became. A retried job whose
// concurrency key has no free slot is blocked (docs/operations.md: "a
// blocked one waits for its concurrency slot"); the command must not say
// it is ready.
func TestReviewAdminCLIRetrySaysABlockedJobIsBlocked(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s, db := reviewStore(t, b)
			one := &engine.Conc{Key: "acct/1", To: 1, Duration: time.Minute}
			got, err := s.Enqueue(ctx, nil, engine.At(time.Now()), []engine.NewJob{
				{Kind: "ping", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1, Conc: one},
				{Kind: "ping", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1, Conc: one},
			})
			require.NoError(t, err)
			second := got[1].ID
			code, _, stderr := run(t, "cancel", db, fmt.Sprint(second))
			require.Equal(t, 0, code, stderr)
			code, out, stderr := run(t, "retry", db, fmt.Sprint(second))
			require.Equal(t, 0, code, stderr)
			j, err := s.GetJob(ctx, second)
			require.NoError(t, err)
			require.Equal(t, engine.StateBlocked, j.State, "the key's one slot is held by the first job")
			require.Equal(t, fmt.Sprintf("job %d is blocked\n", second), out, "the command says what the job became")
		})
	}
}

// `sluice cancel A B C` where B cannot be cancelled (it is running, or
// was just cancelled by a colleague) still acts on C, or at least says
// it did not: here C is left as it was, and the output names only A.
func TestReviewAdminCLIOneRefusedIDDoesNotSilentlySkipTheRest(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s, db := reviewStore(t, b)
			got, err := s.Enqueue(ctx, nil, engine.At(time.Now()), []engine.NewJob{
				{Kind: "ping", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1},
				{Kind: "ping", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1},
				{Kind: "ping", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1},
			})
			require.NoError(t, err)
			a, bb, c := got[0].ID, got[1].ID, got[2].ID
			// B is cancelled already (a colleague got there first).
			code, _, stderr := run(t, "cancel", db, fmt.Sprint(bb))
			require.Equal(t, 0, code, stderr)
			code, out, stderr := run(t, "cancel", db, fmt.Sprint(a), fmt.Sprint(bb), fmt.Sprint(c))
			require.Equal(t, 1, code, "one id was refused")
			require.Contains(t, stderr, fmt.Sprintf("job %d", bb))
			j, err := s.GetJob(ctx, c)
			require.NoError(t, err)
			if j.State != engine.StateCancelled {
				require.Contains(t, out+stderr, fmt.Sprint(c), "job %d was left %s without a word: out %q, err %q", c, j.State, out, stderr)
			}
		})
	}
}
