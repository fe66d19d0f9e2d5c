// Command sluice is sluice's operator tool: migrate the schema, run a
// dispatcher, inspect and repair jobs, see budgets, run the demo and the
// benchmark. Workers run in your own program (see package cli), which
// knows your job kinds.
package main

import (
	"os"
	"strings"

	"github.com/sluicequeue/sluice/cli"
)

func main() {
	os.Exit(newApp().Main())
}

// newApp is the sluice binary's app: the built-in commands, demo and
// bench.
func newApp() *cli.App {
	return &cli.App{
		Name: "sluice",
		Commands: append([]cli.Command{
			{Name: "demo", Summary: "run a self-contained demo on a fresh SQLite file (or --database-url)", Run: runDemo},
			{Name: "bench", Summary: "measure throughput, latency and rate limits: burn-down, continuous, " + strings.Join(benchScenarios, ", "), Run: runBench},
		}, benchWorkerCommand()...),
	}
}
