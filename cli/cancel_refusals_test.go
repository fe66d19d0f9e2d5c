package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// `sluice cancel` names each refused job on a line of its own,
// as `sluice retry` does (operate joins one error per refused job, and
// cli's each splits them). CancelJobs joins operate's error once more with
// refundFair's (errors.Join(err, nil) is a join of one), so each sees one
// error and the refusals come out on one line.
func TestCancelNamesEachRefusedJobOnALineOfItsOwn(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s, db := operatedStore(t, b)
			got, err := s.Enqueue(ctx, nil, engine.At(time.Now()), []engine.NewJob{
				{Kind: "ping", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1},
			})
			require.NoError(t, err)
			a := got[0].ID
			code, _, stderr := run(t, "retry", db, "999998", "999999")
			require.Equal(t, 1, code)
			require.Equal(t, 2, strings.Count(stderr, "\n"), "retry: a line per refused job: %q", stderr)

			code, out, stderr := run(t, "cancel", db, "999998", fmt.Sprint(a), "999999")
			require.Equal(t, 1, code)
			require.Equal(t, fmt.Sprintf("job %d is cancelled\n", a), out)
			require.Equal(t, "myapp cancel: cannot cancel job 999998: not found\nmyapp cancel: cannot cancel job 999999: not found\n", stderr,
				"cancel: a line per refused job, as retry")
		})
	}
}
