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

// operatedStore opens a fresh, migrated database of backend b and returns
// it with its --database-url flag.
func operatedStore(t *testing.T, b testdb.Backend) (*engine.Store, string) {
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
func TestCLIRetrySaysABlockedJobIsBlocked(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s, db := operatedStore(t, b)
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
func TestCLIOneRefusedIDDoesNotSilentlySkipTheRest(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s, db := operatedStore(t, b)
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
			require.Equal(t, fmt.Sprintf("job %d is cancelled\njob %d is cancelled\n", a, c), out, "the ids after the refused one are acted on too")
			require.Contains(t, stderr, fmt.Sprintf("cannot cancel job %d: it is cancelled, and only ready, scheduled, parked, blocked or failed jobs can be cancelled", bb))
			for _, id := range []int64{a, c} {
				j, err := s.GetJob(ctx, id)
				require.NoError(t, err)
				require.Equal(t, engine.StateCancelled, j.State)
			}
			// Two refusals are both named; an id that does not exist too.
			code, out, stderr = run(t, "retry", db, fmt.Sprint(a), "999999", fmt.Sprint(c))
			require.Equal(t, 1, code)
			require.Equal(t, fmt.Sprintf("job %d is ready\njob %d is ready\n", a, c), out)
			require.Contains(t, stderr, "cannot retry job 999999: not found")
			code, _, stderr = run(t, "retry", db, "999998", "999999")
			require.Equal(t, 1, code)
			require.Equal(t, "myapp retry: cannot retry job 999998: not found\nmyapp retry: cannot retry job 999999: not found\n", stderr, "a line per refused job")
		})
	}
}
