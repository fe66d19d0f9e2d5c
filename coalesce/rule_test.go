package coalesce_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
)

type shop struct{ ID int64 }

type push struct {
	Shop shop
	SKU  string
}

func TestCompile(t *testing.T) {
	c, err := coalesce.Compile("push", coalesce.Rule[push]{Key: func(p push) any { return p.Shop }, OnConflict: coalesce.Collect, MaxCalls: 100, OnFull: coalesce.Dispatch})
	require.NoError(t, err)
	require.Equal(t, coalesce.Spec{Scope: "push", OnConflict: coalesce.Collect, MaxCalls: 100, Dispatch: true}, c.Spec)
	k, err := c.CoalesceKey(push{Shop: shop{ID: 9}})
	require.NoError(t, err)
	require.Equal(t, "push/shop/9", k)

	c, err = coalesce.Compile("push", coalesce.Rule[push]{})
	require.NoError(t, err)
	require.Nil(t, c)
}

func TestCompileRefusesBadCombinations(t *testing.T) {
	for _, c := range []struct {
		r    coalesce.Rule[push]
		want string
	}{
		{coalesce.Rule[push]{Key: "k", MaxCalls: 5}, "MaxCalls needs OnConflict: Collect"},
		{coalesce.Rule[push]{Key: "k", OnConflict: coalesce.Collect, MaxCalls: -1}, "MaxCalls is -1"},
		{coalesce.Rule[push]{Key: "k", OnConflict: coalesce.Collect, MaxCalls: 1}, "MaxCalls is 1"},
		{coalesce.Rule[push]{Key: "k", OnConflict: coalesce.Collect, OnFull: coalesce.Dispatch}, "OnFull: Dispatch needs MaxCalls"},
		{coalesce.Rule[push]{Key: "k", MaxDelay: time.Minute}, "MaxDelay needs Debounce"},
		{coalesce.Rule[push]{Key: "k", Debounce: time.Minute, MaxDelay: time.Second}, "MaxDelay (1s) is shorter than Debounce (1m0s)"},
		{coalesce.Rule[push]{Key: "k", Debounce: -time.Second}, "Debounce is -1s"},
		{coalesce.Rule[push]{Key: "k", OnConflict: 9}, "OnConflict is 9"},
		{coalesce.Rule[push]{Key: 1.5}, "unsupported declaration"},
		// The stored key is scope/key: Group "sync/eu" with key "acct"
		// and Group "sync" with key "eu/acct" would share one key.
		{coalesce.Rule[push]{Key: "acct", Group: "sync/eu"}, `Group "sync/eu" contains "/"`},
		// A literal key's stored form is known at registration.
		{coalesce.Rule[push]{Key: strings.Repeat("k", 251)}, `coalesce key "push/kkk`},
	} {
		_, err := coalesce.Compile("push", c.r)
		require.ErrorIs(t, err, coalesce.ErrInvalid)
		require.ErrorContains(t, err, c.want)
	}
}

func TestCompileRefusesAKindWithASlash(t *testing.T) {
	_, err := coalesce.Compile("push/daily", coalesce.Rule[push]{Key: func(p push) any { return p.SKU }})
	require.ErrorIs(t, err, coalesce.ErrInvalid)
	require.ErrorContains(t, err, `kind "push/daily" contains "/"`)
	// Without a key the rule is off, and the kind's name is not a scope.
	c, err := coalesce.Compile("push/daily", coalesce.Rule[push]{})
	require.NoError(t, err)
	require.Nil(t, c)
}

func TestRunAtIsTrailingCappedAndNeverBeforeTheRateSlot(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := coalesce.Spec{Debounce: 10 * time.Second, MaxDelay: time.Minute}
	require.Equal(t, t0.Add(15*time.Second), s.RunAt(t0.Add(5*time.Second), t0, time.Time{}), "trailing edge")
	require.Equal(t, t0.Add(time.Minute), s.RunAt(t0.Add(55*time.Second), t0, time.Time{}), "capped at MaxDelay after the first call")
	require.Equal(t, t0.Add(2*time.Minute), s.RunAt(t0.Add(5*time.Second), t0, t0.Add(2*time.Minute)), "never before its rate slot")
}
