package ratelimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/ratelimit"
)

type order struct{ Items int }

// A Cost function that panics returns an error naming it, as a key
// function does, instead of taking its caller (an enqueue) down.
func TestACostThatPanicsReturnsAnError(t *testing.T) {
	r, err := ratelimit.Compile("orders", ratelimit.Limit[order]{To: 10, Per: time.Second, Burst: 10, Key: "all",
		Cost: func(o order) int { return 10 / o.Items }})
	require.NoError(t, err)
	c, err := r.Cost(order{Items: 2})
	require.NoError(t, err)
	require.Equal(t, 5, c)
	require.NotPanics(t, func() { c, err = r.Cost(order{}) })
	require.ErrorContains(t, err, "rate limit orders: RateLimit.Cost: cost function panicked: runtime error: integer divide by zero")
	require.Zero(t, c)
}
