package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// operations.md, "Database settings sluice relies on": on MySQL and
// MariaDB the sessions' sql_mode is the DBA's or the URL's, and sluice
// works under any of the modes a server is set up with: quotes read as
// identifiers (ANSI_QUOTES, ANSI), backslashes as plain characters
// (NO_BACKSLASH_ESCAPES: the driver, which writes each value into the
// statement's text, escapes quotes by doubling them instead), strict mode
// off (every value sluice writes is checked or bounded before the
// statement, so none is cut short), ONLY_FULL_GROUP_BY,
// PAD_CHAR_TO_FULL_LENGTH, and MariaDB's ORACLE. Each migrates an empty
// database, and args, keys and an error full of quotes, backslashes and
// a NUL go in and come back unchanged.
func TestMySQLWorksUnderTheSQLModesADBAMaySet(t *testing.T) {
	b, ok := testdb.Named(t, "mysql")
	if !ok {
		t.Skip("no MySQL: set SLUICE_TEST_MYSQL_URL")
	}
	const nasty = `it's a \' \\ \" "quoted" \n \0 ` + "`tick` %_"
	for _, mode := range []string{
		"NO_BACKSLASH_ESCAPES",
		"ANSI_QUOTES,NO_BACKSLASH_ESCAPES,ONLY_FULL_GROUP_BY,PAD_CHAR_TO_FULL_LENGTH", // and not strict
		"ANSI",
		"",
		"ORACLE",
	} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			s := testdb.Opener(t, b.URL(t)+"?sql_mode=%27"+mode+"%27")()
			_, err := s.MigrateUp(ctx, 0)
			require.NoError(t, err)
			j := job("k", "default", 0)
			arg, err := json.Marshal(map[string]string{"S": nasty})
			require.NoError(t, err)
			j.Args = arg
			j.Conc = &engine.Conc{Key: "acct/" + nasty, To: 1, Duration: time.Minute}
			id := enqueue(t, s, t0, j)[0]
			pid := register(t, s, t0)
			got := claim(t, s, pid, t0, 1).Jobs
			require.Len(t, got, 1)
			require.JSONEq(t, string(j.Args), string(got[0].Args), "args come back unchanged")
			require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: ran(t, s,
				engine.Transition{ID: id, State: engine.StateFailed, Error: nasty + "\x00"})}))
			info := state(t, s, id)
			require.Equal(t, engine.StateFailed, info.State)
			require.Equal(t, nasty+`\x00`, info.LastError, "the error is kept, its NUL escaped")
			require.NotNil(t, info.Conc)
			require.Equal(t, "acct/"+nasty, info.Conc.Key)
		})
	}
}
