package mysql

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSteadyZones(t *testing.T) {
	for _, c := range []struct {
		tz, system string
		want       bool
	}{
		{"+00:00", "CET", true},
		{"-05:30", "", true},
		{"UTC", "", true},
		{"SYSTEM", "UTC", true},
		{"SYSTEM", "Etc/UTC", true},
		{"SYSTEM", "CET", false},
		{"Europe/Paris", "UTC", false},
		{"SYSTEM", "+02:00", true},
	} {
		require.Equal(t, c.want, steadyZone(c.tz, c.system), "time_zone %q, system %q", c.tz, c.system)
	}
}
