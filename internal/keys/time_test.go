package keys_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/keys"
)

// A time.Time key is its instant: in UTC, RFC 3339 with nanoseconds,
// whatever its location and whether it holds a monotonic reading, so
// the args a handler receives (decoded from JSON, a fixed offset with
// no zone name) give the key of the args that were enqueued.
func TestJoinTimeIsTheInstantInUTC(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, paris)
	var decoded time.Time
	b, err := json.Marshal(day)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &decoded))
	now := time.Now() // holds a monotonic reading
	for _, c := range []struct {
		in   any
		want string
	}{
		{day, "2026-02-28T23:00:00Z"},
		{day.UTC(), "2026-02-28T23:00:00Z"},
		{decoded, "2026-02-28T23:00:00Z"},
		{day.In(time.FixedZone("", -5*3600)), "2026-02-28T23:00:00Z"},
		{&day, "2026-02-28T23:00:00Z"},
		{(*time.Time)(nil), ""},
		{day.Add(1500 * time.Millisecond), "2026-02-28T23:00:01.5Z"},
		{day.Add(time.Nanosecond), "2026-02-28T23:00:00.000000001Z"},
		{[]any{"acct", day}, "acct/2026-02-28T23:00:00Z"},
		{time.Time{}, "0001-01-01T00:00:00Z"},
		{now, now.UTC().Round(0).Format(time.RFC3339Nano)},
	} {
		got, err := keys.Join(c.in)
		require.NoError(t, err, "%v", c.in)
		require.Equal(t, c.want, got, "%v", c.in)
	}
	a, err := keys.Join(now)
	require.NoError(t, err)
	b2, err := keys.Join(now.Round(0).In(paris))
	require.NoError(t, err)
	require.Equal(t, a, b2, "a monotonic reading and a location are not part of the key")
}
