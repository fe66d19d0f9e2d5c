// Command fair-tenants is the recipe for a queue shared by tenants, one of
// which floods it: with a fairness key per tenant, claims share the queue
// between the tenants that have work, so the quiet tenant's jobs run at
// once, interleaved with the flood, instead of behind it.
//
// The bulk tenant enqueues 1,000 jobs; then the interactive tenant enqueues
// 20. A worker drains the queue, and the program prints, every 10 jobs,
// what share of those jobs each tenant got. Without jobs.Fair the
// interactive jobs would wait for the whole flood.
package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/sluicequeue/sluice/examples/internal/recipe"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

// Export exports one tenant's report.
type Export struct{ Tenant string }

// Kind names the job type.
func (Export) Kind() string { return "export" }

// byTenant is the fairness key. A jobs.FairWeight(func(Export) int) beside
// it would give paying tenants a larger share.
func byTenant(e Export) any { return e.Tenant }

// window is how many runs each printed line covers.
const window = 10

// run enqueues the flood and then the quiet tenant's jobs, drains the
// queue with one worker, and returns the order the tenants' jobs ran in.
func run(ctx context.Context, s *store.Store, flood, quiet int) ([]string, error) {
	var mu sync.Mutex
	var ran []string
	reg := jobs.NewRegistry()
	err := jobs.Register(reg, func(_ context.Context, j *jobs.Job[Export]) error {
		mu.Lock()
		ran = append(ran, j.Args.Tenant)
		mu.Unlock()
		return nil
	}, jobs.Fair(byTenant))
	if err != nil {
		return nil, err
	}
	client := jobs.NewClient(s, reg, jobs.ClientConfig{})
	for _, t := range []struct {
		tenant string
		n      int
	}{{"bulk", flood}, {"interactive", quiet}} {
		items := make([]jobs.Item, t.n)
		for i := range items {
			items[i] = jobs.Item{Args: Export{Tenant: t.tenant}}
		}
		if _, err := client.EnqueueMany(ctx, items); err != nil {
			return nil, err
		}
	}
	w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{Concurrency: window})
	if err != nil {
		return nil, err
	}
	if _, err := w.Drain(ctx); err != nil {
		return nil, err
	}
	return ran, nil
}

// shares prints, per window of runs while the quiet tenant has jobs, each
// tenant's share of it.
func shares(ran []string) []string {
	var out []string
	for i := 0; i < len(ran); i += window {
		part := ran[i:min(i+window, len(ran))]
		n := 0
		for _, t := range part {
			if t == "interactive" {
				n++
			}
		}
		out = append(out, fmt.Sprintf("jobs %4d-%4d: bulk %3.0f%%, interactive %3.0f%%  %s",
			i+1, i+len(part), 100*float64(len(part)-n)/float64(len(part)), 100*float64(n)/float64(len(part)), strings.Repeat("#", n)))
		if n == 0 {
			break
		}
	}
	return out
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, closeFn, err := recipe.TempStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeFn()
	ran, err := run(ctx, s, 1000, 20)
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range shares(ran) {
		fmt.Println(line)
	}
	fmt.Printf("… and the rest of the flood: %d jobs in all\n", len(ran))
}
