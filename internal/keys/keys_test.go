package keys_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/keys"
)

type Account struct {
	ID   int64
	Name string
}

type shop string

func (s shop) SluiceKey() string { return "Shop/" + string(s) }

type noID struct{ Name string }

func TestJoin(t *testing.T) {
	cases := []struct {
		in   any
		want string
	}{
		{nil, ""},
		{"acct", "acct"},
		{42, "42"},
		{uint8(7), "7"},
		{true, "true"},
		{[]any{"a", 1, "b"}, "a/1/b"},
		{[]string{"a/b"}, "a/b"},
		{[2]int{1, 2}, "1/2"},
		{Account{ID: 7}, "Account/7"},
		{&Account{ID: 8}, "Account/8"},
		{(*Account)(nil), ""},
		{shop("x"), "Shop/x"},
		{[]any{Account{ID: 1}, "eu"}, "Account/1/eu"},
		// What encoding/json decodes a number into: a whole float is
		// the number's key.
		{float64(42), "42"},
		{float32(-3), "-3"},
		{float64(-(1 << 63)), "-9223372036854775808"},
		{[]any{float64(1), "a"}, "1/a"},
	}
	for _, c := range cases {
		got, err := keys.Join(c.in)
		require.NoError(t, err, "%#v", c.in)
		require.Equal(t, c.want, got, "%#v", c.in)
	}
}

func TestJoinRefusesUnsupported(t *testing.T) {
	for _, in := range []any{map[string]int{"a": 1}, func() {}, noID{Name: "x"}, 1.5, math.NaN(), math.Inf(1), float64(1 << 63), 1e300} {
		_, err := keys.Join(in)
		require.ErrorIs(t, err, keys.ErrUnsupported, "%#v", in)
	}
	_, err := keys.Join(42.5)
	require.ErrorContains(t, err, "the float 42.5 (a float key must be a whole number")
}

type args struct{ Account int }

func TestCompile(t *testing.T) {
	f, err := keys.Compile[args]("RateLimit.Key", nil)
	require.NoError(t, err)
	require.Nil(t, f)

	f, err = keys.Compile[args]("RateLimit.Key", "global")
	require.NoError(t, err)
	k, err := f(args{Account: 1})
	require.NoError(t, err)
	require.Equal(t, "global", k)

	f, err = keys.Compile[args]("RateLimit.Key", func(a args) any { return a.Account })
	require.NoError(t, err)
	k, err = f(args{Account: 3})
	require.NoError(t, err)
	require.Equal(t, "3", k)

	f, err = keys.Compile[args]("RateLimit.Key", func(a args) (any, error) { return nil, errors.New("no account") })
	require.NoError(t, err)
	_, err = f(args{})
	require.ErrorContains(t, err, "RateLimit.Key: no account")

	f, err = keys.Compile[args]("RateLimit.Key", func(a args) any { panic("boom") })
	require.NoError(t, err)
	_, err = f(args{})
	require.ErrorContains(t, err, "RateLimit.Key: key function panicked: boom")

	_, err = keys.Compile[args]("RateLimit.Key", 123)
	require.ErrorContains(t, err, "RateLimit.Key: unsupported declaration of type int")

	_, err = keys.Compile[args]("RateLimit.Key", func(a int) any { return a })
	require.ErrorContains(t, err, "RateLimit.Key: unsupported declaration")
}

func TestScoped(t *testing.T) {
	require.Equal(t, "Sync", keys.Scoped("Sync", ""))
	require.Equal(t, "Sync/Account/7", keys.Scoped("Sync", "Account/7"))
}
