package keys_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/keys"
)

func TestCheckAccepts(t *testing.T) {
	for _, k := range []string{
		"a",
		"Sync/Account/7",
		"@queue/sms",
		"名前/ключ/🔑",
		"with space and \u00a0 no-break space",
		" leading space",
		"trailing no-break space\u00a0",
		"\ufffd is a valid character",
		strings.Repeat("k", keys.MaxBytes),
		strings.Repeat("é", keys.MaxBytes/2) + "k", // 255 bytes, 128 characters
	} {
		require.NoError(t, keys.Check("rate-limit key", k), "%q", k)
	}
}

func TestCheckRefuses(t *testing.T) {
	cases := []struct {
		key, want string
		tooLong   bool
	}{
		{"", `rate-limit key "" is empty`, false},
		{strings.Repeat("k", keys.MaxBytes+1), "is 256 bytes; a key holds at most 255", true},
		{strings.Repeat("k", 16<<10), "is 16384 bytes; a key holds at most 255", true},
		// 128 two-byte characters: 256 bytes, though only 128 characters.
		{strings.Repeat("é", 128), "is 256 bytes", true},
		{"a\tb", "contains a tab at byte 1", false},
		{"a\nb", "contains a line break at byte 1", false},
		{"a\x00b", "contains a NUL byte at byte 1", false},
		{"a\x7fb", "contains the control character U+007F at byte 1", false},
		{"a\u0085b", "contains the control character U+0085 at byte 1", false},
		{"acct/\xff", "is not valid UTF-8 (byte 5 is 0xff)", false},
		{"acct/\xe2\x82", "is not valid UTF-8 (byte 5 is 0xe2)", false}, // a cut multi-byte character
		{"\xed\xa0\x80", "is not valid UTF-8", false},                   // a surrogate
		{"acct ", "ends with a space", false},
		{"   ", "ends with a space", false},
	}
	for _, c := range cases {
		err := keys.Check("rate-limit key", c.key)
		require.Error(t, err, "%q", c.key)
		require.ErrorIs(t, err, keys.ErrInvalid)
		require.Equal(t, c.tooLong, errors.Is(err, keys.ErrTooLong), "%q", c.key)
		require.ErrorContains(t, err, c.want)
		require.True(t, strings.HasPrefix(err.Error(), "rate-limit key "), err.Error())
		requireSafeMessage(t, err.Error())
	}
}

func TestPreviewIsShortASCIIAndCutsOnACharacter(t *testing.T) {
	require.Equal(t, `"short"`, keys.Preview("short"))
	long := strings.Repeat("a", 39) + "€" + strings.Repeat("b", 100) // € spans bytes 39-41
	require.Equal(t, strconv.Quote(strings.Repeat("a", 39))+"...", keys.Preview(long))
	require.Equal(t, `"\xff\x00\u00e9"`, keys.Preview("\xff\x00é"))
	p := keys.Preview(strings.Repeat("\xff", 1000))
	requireSafeMessage(t, p)
	require.Less(t, len(p), 200)
}

// requireSafeMessage checks that an error message can go anywhere: ASCII
// apart from the "..." of a preview, no control characters, short.
func requireSafeMessage(t *testing.T, msg string) {
	t.Helper()
	require.True(t, utf8.ValidString(msg), "%q", msg)
	for _, r := range msg {
		require.False(t, unicode.IsControl(r), "%q holds a control character", msg)
		require.Less(t, r, rune(utf8.RuneSelf), "%q is not ASCII", msg)
	}
	require.Less(t, len(msg), 300, "%q", msg)
}

// checkOracle is Check's rule written out plainly.
func checkOracle(k string) bool {
	if len(k) == 0 || len(k) > keys.MaxBytes || !utf8.ValidString(k) || strings.HasSuffix(k, " ") {
		return false
	}
	return !strings.ContainsFunc(k, unicode.IsControl)
}

func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		"", "a", "Sync/Account/7", "a\tb", "a\x00b", "\xff", "\xe2\x82", "é", "🔑",
		strings.Repeat("k", 255), strings.Repeat("k", 256), strings.Repeat("é", 128),
		strings.Repeat("a", 39) + "€", "\u0085", "\u2028", "\ufffd", "\xed\xa0\x80", "a ", " a",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, k string) {
		err := keys.Check("key", k)
		require.Equal(t, checkOracle(k), err == nil, "%q: %v", k, err)
		if err != nil {
			require.ErrorIs(t, err, keys.ErrInvalid)
			require.Equal(t, len(k) > keys.MaxBytes, errors.Is(err, keys.ErrTooLong))
			requireSafeMessage(t, err.Error())
		}
	})
}

func FuzzJoin(f *testing.F) {
	f.Add("acct", "eu", int64(7), uint8(1), true)
	f.Add("", "", int64(0), uint8(0), false)
	f.Add("a/b", "\xff", int64(-1)<<63, uint8(255), true)
	f.Add("\x00", "é", int64(1)<<62, uint8(9), false)
	f.Add(strings.Repeat("k", 300), "🔑", int64(42), uint8(3), true)
	f.Fuzz(func(t *testing.T, a, b string, n int64, u uint8, flag bool) {
		// A string is its own key, byte for byte: Join never alters it.
		got, err := keys.Join(a)
		require.NoError(t, err)
		require.Equal(t, a, got)

		// A slice joins its non-empty parts with "/"; numbers and booleans
		// give their text, so 7 and "7" give one key.
		got, err = keys.Join([]any{a, n, b, u, flag, nil})
		require.NoError(t, err)
		var want []string
		for _, p := range []string{a, strconv.FormatInt(n, 10), b, strconv.FormatUint(uint64(u), 10), strconv.FormatBool(flag)} {
			if p != "" {
				want = append(want, p)
			}
		}
		require.Equal(t, strings.Join(want, "/"), got)
		same, err := keys.Join([]string{a, strconv.FormatInt(n, 10), b, strconv.Itoa(int(u)), strconv.FormatBool(flag)})
		require.NoError(t, err)
		require.Equal(t, got, same)

		// A struct with an ID gives "Type/ID".
		got, err = keys.Join(Account{ID: n, Name: a})
		require.NoError(t, err)
		require.Equal(t, "Account/"+strconv.FormatInt(n, 10), got)

		// Whatever Join gives, Check judges by the one rule, and the
		// scoped key is refused exactly when the rule says so.
		scoped := keys.Scoped("Sync", got)
		require.Equal(t, checkOracle(scoped), keys.Check("rate-limit key", scoped) == nil)
	})
}
