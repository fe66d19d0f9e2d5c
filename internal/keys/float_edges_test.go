package keys_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/keys"
)

// the float rule's edges (holds). Negative zero is 0's key;
// -2^63 is int64's lowest; a whole float above 2^53 is the key of the
// number the float holds, so 2^53+1 decoded into a float64 (as
// encoding/json does) is 2^53's key, not its own: neighbouring ids collide
// once decoded, which no rule on floats can undo.
func TestFloatKeyEdges(t *testing.T) {
	for _, c := range []struct {
		in   any
		want string
	}{
		{math.Copysign(0, -1), "0"},
		{float64(-(1 << 63)), "-9223372036854775808"},
		{float64(1<<53 + 1), "9007199254740992"},
		{float32(1 << 24), "16777216"},
	} {
		got, err := keys.Join(c.in)
		require.NoError(t, err, "%v", c.in)
		require.Equal(t, c.want, got)
	}
	_, err := keys.Join(math.Inf(-1))
	require.ErrorIs(t, err, keys.ErrUnsupported)
	_, err = keys.Join(math.Nextafter(-(1 << 63), math.Inf(-1)))
	require.ErrorIs(t, err, keys.ErrUnsupported)
}
