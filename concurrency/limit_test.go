package concurrency_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
)

type account struct{ ID int64 }

type args struct{ Account account }

func TestCompileDefaultsAndKeys(t *testing.T) {
	r, err := concurrency.Compile("sync", concurrency.Limit[args]{Key: func(a args) any { return a.Account }})
	require.NoError(t, err)
	require.Equal(t, concurrency.Spec{Scope: "sync", To: 1, Duration: 3 * time.Minute}, r.Spec)
	k, err := r.SlotKey(args{Account: account{ID: 7}})
	require.NoError(t, err)
	require.Equal(t, "sync/account/7", k)

	r, err = concurrency.Compile("sync", concurrency.Limit[args]{Key: "all", To: 3, Group: "Stripe", Duration: time.Minute, OnConflict: concurrency.Discard})
	require.NoError(t, err)
	require.Equal(t, concurrency.Spec{Scope: "Stripe", To: 3, Duration: time.Minute, Discard: true}, r.Spec)
	k, err = r.SlotKey(args{})
	require.NoError(t, err)
	require.Equal(t, "Stripe/all", k)

	r, err = concurrency.Compile("sync", concurrency.Limit[args]{})
	require.NoError(t, err)
	require.Nil(t, r, "a nil Key turns the limit off")
}

// TestCompileRefusesInvalid: bad declarations are refused at registration,
// naming what is wrong.
func TestCompileRefusesInvalid(t *testing.T) {
	for _, c := range []struct {
		l    concurrency.Limit[args]
		want string
	}{
		{concurrency.Limit[args]{Key: "k", To: -1}, "To is -1"},
		{concurrency.Limit[args]{Key: "k", Duration: time.Millisecond}, "Duration is 1ms"},
		{concurrency.Limit[args]{Key: "k", OnConflict: 7}, "OnConflict is 7"},
		{concurrency.Limit[args]{Key: 3.5}, "unsupported declaration"},
		// The stored key is scope/key: Group "acct/1" with key "" and
		// Group "acct" with key "1" shared one semaphore.
		{concurrency.Limit[args]{Key: "", Group: "acct/1"}, `Group "acct/1" contains "/"`},
		// A literal key's stored form is known at registration.
		{concurrency.Limit[args]{Key: strings.Repeat("k", 251)}, `concurrency key "sync/kkk`},
	} {
		_, err := concurrency.Compile("sync", c.l)
		require.ErrorIs(t, err, concurrency.ErrInvalid)
		require.ErrorContains(t, err, c.want)
	}
}
