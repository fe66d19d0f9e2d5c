package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// `sluice help` lists bench's every scenario: its summary left out fair.
func TestBenchsSummaryNamesEveryScenario(t *testing.T) {
	app := newApp()
	var out, errOut bytes.Buffer
	app.Stdout, app.Stderr = &out, &errOut
	app.Run(context.Background(), []string{"help"})
	help := out.String() + errOut.String()
	var line string
	for _, l := range strings.Split(help, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "bench ") {
			line = l
		}
	}
	require.NotEmpty(t, line, help)
	for _, s := range []string{"burn-down", "continuous", "drain", "flood", "loose", "fair"} {
		require.Contains(t, line, s)
	}
	code := app.Run(context.Background(), []string{"bench", "--scenario", "fairr"})
	require.Equal(t, 2, code)
	require.Contains(t, errOut.String(), `--scenario "fairr": want drain, flood, loose, fair`)
}
