package keys_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/keys"
)

func TestScopeIsTheGroupOrElseTheKind(t *testing.T) {
	scope, err := keys.Scope("coalesce key", "", "sync", "global")
	require.NoError(t, err)
	require.Equal(t, "sync", scope)
	scope, err = keys.Scope("coalesce key", "shops", "sync", func(int) any { return 1 })
	require.NoError(t, err)
	require.Equal(t, "shops", scope)
	scope, err = keys.Scope("coalesce key", "", strings.Repeat("k", 250), "1234")
	require.NoError(t, err, "a literal whose stored key is 255 bytes fits")
	require.Equal(t, strings.Repeat("k", 250), scope)
}

// A key is stored as SCOPE/VALUE, so a scope with "/" could share keys
// with another scope; and a literal key is known at registration, so one
// that cannot be stored with its scope is refused there, not at every
// enqueue.
func TestScopeRefuses(t *testing.T) {
	long := strings.Repeat("k", 250)
	for _, c := range []struct {
		group, kind string
		decl        any
		want        string
		tooLong     bool
	}{
		{"", "report/daily", "k", `kind "report/daily" contains "/", which ends the scope in a stored key`, false},
		{"sync/eu", "report", "k", `Group "sync/eu" contains "/"`, false},
		{"", "", "k", `kind "" is empty`, false},
		{"g ", "report", "k", `Group "g " ends with a space`, false},
		{"", "report\n", "k", `kind "report\n" contains a line break`, false},
		{"", long, "global", `rate-limit key "` + long[:40] + `"... is 257 bytes; a key holds at most 255`, true},
		{long, "report", "global", "is 257 bytes", true},
		{"", "report", "a\tb", `rate-limit key "report/a\tb" contains a tab`, false},
		{"", "report", "acct ", "ends with a space", false},
	} {
		_, err := keys.Scope("rate-limit key", c.group, c.kind, c.decl)
		require.ErrorIs(t, err, keys.ErrInvalid, "%+v", c)
		require.Equal(t, c.tooLong, errors.Is(err, keys.ErrTooLong), "%+v", c)
		require.ErrorContains(t, err, c.want)
	}
	// A key function's value is known only at enqueue.
	_, err := keys.Scope("rate-limit key", "", long, func(string) any { return "global" })
	require.NoError(t, err)
}
