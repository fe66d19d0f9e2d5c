package cli_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

type limited struct{ N int }

func (limited) Kind() string { return "limited" }

func TestExplainCommand(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ids, runApp := explainApp(t, b, "<script>alert(1)</script>")
			code, out, stderr := runApp("explain", strconv.FormatInt(ids[2], 10))
			require.Equal(t, 0, code, stderr)
			require.Contains(t, out, "is parked on rate limit limited/<script>alert(1)</script> (1 per 1h0m0s, burst 1 (1 every 1h0m0s)): 1 parked job(s) of the budget get slots before it")
			require.Regexp(t, `estimated start: \S+ \S+ \(in 2h\)`, out, "one hour for the job ahead, one for the budget's debt")
			require.Regexp(t, `deferred: [1-9]\d* time\(s\), last: .*limited/<script>`, out)

			code, out, stderr = runApp("explain", "--json", strconv.FormatInt(ids[2], 10))
			require.Equal(t, 0, code, stderr)
			var e jobs.Explanation
			require.NoError(t, json.Unmarshal([]byte(out), &e))
			require.Equal(t, jobs.ReasonParked, e.Reason)
			require.Equal(t, ids[2], e.JobID)
			require.Equal(t, 1, e.Limits[0].To)

			code, _, stderr = runApp("explain", "99999999")
			require.Equal(t, 1, code)
			require.Contains(t, stderr, "not found")
			code, _, stderr = runApp("explain", "<script>")
			require.Equal(t, 2, code)
			require.Contains(t, stderr, `"<script>" is not a job id`)
			code, _, _ = runApp("explain")
			require.Equal(t, 2, code)
		})
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
