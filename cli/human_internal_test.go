package cli

import (
	"github.com/sluicequeue/sluice/internal/human"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDurationsAreRoundedForPeople(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                    "0s",
		840*time.Millisecond + 123456:        "840ms",
		4*time.Second + 217*time.Millisecond: "4.2s",
		3*time.Minute + 44*time.Second + 612*time.Millisecond: "3m45s",
		3 * time.Minute: "3m",
		59*time.Minute + 59*time.Second + 900*time.Millisecond: "1h",
		2*time.Hour + 5*time.Minute + 20*time.Second:           "2h5m",
		2 * time.Hour:                 "2h",
		75*time.Hour + 10*time.Minute: "3d3h",
		-90 * time.Second:             "-1m30s",
	} {
		require.Equal(t, want, human.Duration(d), "%s", d)
	}
	now := time.Now()
	require.Equal(t, "3m44s ago", fmtIn(now.Add(-3*time.Minute-44*time.Second-200*time.Millisecond), now))
	require.Equal(t, "in 1m", fmtIn(now.Add(time.Minute), now))
	require.Equal(t, "now", fmtIn(now, now))
}
