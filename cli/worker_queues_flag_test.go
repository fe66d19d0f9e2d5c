package cli_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// `worker --queues 'a ,b'` and `--queues a,,b` were trimmed silently into
// a list the operator did not write; they are refused, naming the flag,
// before any database is opened.
func TestWorkerRefusesAQueuesListWithAnEmptyOrSpacedName(t *testing.T) {
	url := "sqlite:" + t.TempDir() + "/x.db"
	for _, c := range []struct{ queues, want string }{
		{"a,,b", `--queues "a,,b" holds an empty queue name (two commas in a row, or one at an end)`},
		{"a,b,", `--queues "a,b," holds an empty queue name`},
		{",a", `--queues ",a" holds an empty queue name`},
		{"a ,b", `--queues "a ,b": queue name "a " has spaces around it; separate the names by commas alone (--queues a,b)`},
		{"a, b", `--queues "a, b": queue name " b" has spaces around it; separate the names by commas alone (--queues a,b)`},
		{"", "--queues is empty"},
	} {
		code, _, stderr := run(t, "worker", "--queues", c.queues, "--database-url", url)
		require.Equal(t, 2, code, "%q: %s", c.queues, stderr)
		require.Contains(t, stderr, c.want, c.queues)
	}
}
