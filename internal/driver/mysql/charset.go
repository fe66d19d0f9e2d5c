package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/sluicequeue/sluice/internal/keys"
)

// charset is the only character set sluice's sessions may use.
//
// The store's own pool interpolates (the driver's interpolateParams: each
// value is written into the statement's text as a literal, escaped with
// backslashes), which is safe only in a character set where a backslash
// or a quote is never part of another character. Under gbk, big5, sjis,
// cp932 or gb18030 the last byte of a character such as "€" may start a
// two-byte character that takes the escaping backslash in, so a job's
// args could end the literal and run SQL of their own. Under utf8
// (utf8mb3) four-byte characters are refused, and under latin1 and others
// text is changed: args would not reach the handler as they were
// enqueued. So the connection's character set is utf8mb4, always.
const charset = "utf8mb4"

// checkURLCharset refuses a URL whose parameters (its query, raw, read as
// the driver reads a DSN's) set the connection's character set, or its
// collation, to anything but utf8mb4's: before the driver sees them, so
// that a collation it would refuse with interpolateParams gets this
// error, which says what to write, instead of one about an option the
// user never set.
func checkURLCharset(rawQuery string) error {
	for p := range strings.SplitSeq(rawQuery, "&") {
		key, value, _ := strings.Cut(p, "=")
		switch key {
		case "charset":
			for cs := range strings.SplitSeq(value, ",") {
				if !strings.EqualFold(cs, charset) {
					return fmt.Errorf("mysql: URL parameter charset is %s; sluice needs %s (job args are written into the statements' text, safely only in %s): "+
						"set charset=%s or leave the parameter out", keys.Preview(value), charset, charset, charset)
				}
			}
		case "collation":
			if !strings.HasPrefix(strings.ToLower(value), charset+"_") {
				return fmt.Errorf("mysql: URL parameter collation is %s, not a collation of %s, the character set sluice needs (job args are written into the statements' text, safely only in %s): "+
					"set a collation of %s (collation=utf8mb4_general_ci, utf8mb4_bin, …) or leave the parameter out", keys.Preview(value), charset, charset, charset)
			}
		}
	}
	return nil
}

// checkSessionCharset refuses a pool whose sessions do not use utf8mb4
// for the statements they send and the results they read, however it
// was set: the URL's charset (checked before), a session variable given
// as a URL parameter (character_set_client=gbk), the server's defaults
// (a server that ignores the character set a client asks for at the
// handshake), or the app's DSN for a pool of its own (OpenDB). Every
// connection of a pool is set up alike, so one of them tells.
func checkSessionCharset(ctx context.Context, db *sql.DB) error {
	var client, conn string
	var results sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT @@character_set_client, @@character_set_connection, @@character_set_results`).Scan(&client, &conn, &results); err != nil {
		return fmt.Errorf("read the session's character set: %w", err)
	}
	for _, v := range []struct {
		name  string
		value sql.NullString
	}{
		{"character_set_client", sql.NullString{String: client, Valid: true}},
		{"character_set_connection", sql.NullString{String: conn, Valid: true}},
		{"character_set_results", results}, // NULL: results come as stored, in utf8mb4
	} {
		if v.value.Valid && !strings.EqualFold(v.value.String, charset) {
			return fmt.Errorf("the sessions' %s is %s; sluice needs %s (job args are sent in the statements' text, safely only in %s)",
				v.name, keys.Preview(v.value.String), charset, charset)
		}
	}
	return nil
}
