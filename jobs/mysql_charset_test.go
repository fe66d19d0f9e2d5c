package jobs_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver/mysql"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

type charsetArgs struct{ S string }

func (charsetArgs) Kind() string { return "charset_args" }

// charsetProbes are args that break out of a string literal the driver
// escaped with backslashes, when the server reads the statement in a
// character set (gbk, big5, sjis, cp932, gb18030) where the last byte of
// "€" starts a two-byte character that takes the backslash in: the first
// closes the row itself and stores the server's version as the job's
// last_error; the second is a syntax error. The third is a four-byte
// character, which utf8 (utf8mb3) refuses.
var charsetProbes = []string{
	"€', 25, 1, 1, NULL, NULL, 0, 0, 0, 0, (SELECT CONCAT(0x696e6a65637465643a20, @@version)), NULL, NULL, NULL, 0) -- ",
	"€' , 'x",
	"🔑 key",
}

// operations.md: a MySQL URL's parameters set up the driver, and the
// store's pool writes each value into the statement's text
// (interpolateParams), safely only in utf8mb4. So a URL that sets any
// other character set, or a collation of another, is refused at Open,
// naming the parameter; so is one whose sessions end up in another
// character set by a session variable; and with utf8mb4 (or no charset:
// the driver's default) args arrive unchanged, "args reach the handler as
// they were enqueued" (guarantees.md). Before, ?charset=gbk let args run
// SQL of their own, ?charset=utf8 refused emoji at the insert, and
// ?collation=gbk_chinese_ci failed with the driver's "interpolateParams
// can not be used with unsafe collations", an option the user never set.
func TestMySQLArgsArriveUnchangedWhateverTheURLsCharset(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		if b.Name != "mysql" {
			continue
		}
		base := b.URL(t)
		for _, c := range []struct{ param, refused string }{
			{"charset=gbk", "URL parameter charset"},
			{"charset=utf8", "URL parameter charset"},
			{"charset=utf8mb4,gbk", "URL parameter charset"},
			{"collation=gbk_chinese_ci", "URL parameter collation"},
			{"interpolateParams=true&collation=big5_chinese_ci", "URL parameter collation"},
			{"character_set_client=gbk", "character_set_client"},
			{"charset=utf8mb4", ""},
			{"charset=UTF8MB4&collation=utf8mb4_bin", ""},
			{"", ""},
		} {
			t.Run(c.param, func(t *testing.T) {
				ctx := context.Background()
				u := base
				if c.param != "" {
					sep := "?"
					if strings.Contains(base, "?") {
						sep = "&"
					}
					u += sep + c.param
				}
				s, err := testdb.OpenURL(ctx, u)
				if c.refused != "" {
					require.ErrorContains(t, err, c.refused)
					require.ErrorContains(t, err, "utf8mb4", "the error says what to use")
					require.NotContains(t, err.Error(), "interpolateParams can not be used", "the driver's error about an option the user never set")
					return
				}
				require.NoError(t, err)
				defer s.Close()
				_, err = s.MigrateUp(ctx, 0)
				require.NoError(t, err)
				reg := jobs.NewRegistry()
				require.NoError(t, jobs.Declare[charsetArgs](reg))
				client := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{})
				for _, v := range charsetProbes {
					res, err := client.Enqueue(ctx, charsetArgs{S: v})
					if err != nil {
						t.Errorf("args %q: %v", v, err)
						continue
					}
					j, err := s.GetJob(ctx, res.ID)
					require.NoError(t, err)
					var got charsetArgs
					if err := json.Unmarshal(j.Args, &got); err != nil || got.S != v || j.LastError != "" {
						t.Errorf("args %q are stored as %q, with last_error %q", v, j.Args, j.LastError)
					}
				}
			})
		}
	}
}

// store.OpenMySQLDB takes the app's own pool, whose DSN sluice does not
// write: it refuses one whose sessions use another character set than
// utf8mb4, whether or not the pool interpolates, naming the session
// variable and what to set.
func TestOpenMySQLDBRefusesAPoolInAnotherCharacterSet(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		if b.Name != "mysql" {
			continue
		}
		cfg, err := mysql.Config(b.URL(t))
		require.NoError(t, err)
		for _, interpolate := range []bool{true, false} {
			cfg.InterpolateParams = interpolate
			dsn := cfg.FormatDSN()
			sep := "?"
			if strings.Contains(dsn, "?") {
				sep = "&"
			}
			db, err := sql.Open("mysql", dsn+sep+"charset=gbk")
			require.NoError(t, err)
			_, err = store.OpenMySQLDB(context.Background(), db)
			require.ErrorContains(t, err, "character_set_client is \"gbk\"", "interpolateParams=%v", interpolate)
			require.ErrorContains(t, err, "charset=utf8mb4")
			require.NoError(t, db.Close())
		}
	}
}
