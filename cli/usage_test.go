package cli_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/operations.md: bad usage is one line on stderr and exit code 2.
// The commands below once dropped the arguments they do not take without
// a word: `sluice jobs failed` (meaning --state failed) listed every job,
// and `budgets clear-idle --batch-size -5` deleted 500 at a time.
func TestStrayArgumentsAndBadNumbersAreRefused(t *testing.T) {
	eachMigrated(t, func(t *testing.T, db string) {
		for _, c := range []struct {
			args []string
			want string // what stderr names
		}{
			{[]string{"jobs", "failed"}, `"failed"`},
			{[]string{"stats", "everything"}, `"everything"`},
			{[]string{"queues", "list", "mail"}, `"mail"`},
			{[]string{"budgets", "list", "extra"}, `"extra"`},
			{[]string{"budgets", "clear-idle", "Stripe/Account/7"}, `"Stripe/Account/7"`},
			{[]string{"semaphores", "extra"}, `"extra"`},
			{[]string{"budgets", "clear-idle", "--batch-size", "-5"}, "--batch-size is -5"},
			{[]string{"budgets", "clear-idle", "--pause", "-1s"}, "--pause is -1s"},
		} {
			code, out, stderr := run(t, append(c.args, db)...)
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Errorf("%v: exit %d, stderr %q, stdout %q; want bad usage (2) naming %s", c.args, code, stderr, out, c.want)
			}
		}
	})
}

// `queues pause` checks the name by the key rule enqueues and workers
// follow (no control character, no trailing space, 1 to 255 bytes); it
// once paused "mail " — on MySQL, whose comparisons ignore trailing
// spaces, that was "mail" — and on PostgreSQL a queue no job can be in.
func TestQueuesPauseChecksTheName(t *testing.T) {
	eachMigrated(t, func(t *testing.T, db string) {
		for _, name := range []string{"mail ", "ma\til", strings.Repeat("q", 300)} {
			code, out, stderr := run(t, "queues", "pause", name, db)
			if code == 0 || !strings.Contains(stderr, "queue") {
				t.Errorf("queues pause %.20q: exit %d, stderr %q, stdout %.40q; want it refused naming the queue", name, code, stderr, out)
			}
		}
	})
}

// eachMigrated runs fn on a migrated scratch database of every backend,
// with the --database-url flag that names it.
func eachMigrated(t *testing.T, fn func(t *testing.T, db string)) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			db := "--database-url=" + b.URL(t)
			code, _, stderr := run(t, "migrate", "up", db)
			require.Equal(t, 0, code, stderr)
			fn(t, db)
		})
	}
}
