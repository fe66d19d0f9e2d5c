// Command backlog-keeps-up is the recipe for a backlog that has to drain at
// the declared rate: at most 10 in any second, draining at 10 − b + 1 a
// second after a burst of b.
//
// A job over its budget waits as a scheduled job with a slot, one emission
// interval after the one before; the worker that deferred it wakes at the
// slot and claims it then, so a backlog drains at its limit's pace with
// default settings, whatever the burst. The program runs a real worker and
// dispatcher for a few seconds with bursts of 2 and 6 and prints the
// claims in each second: 2 then 9 a second, and 6 then 5 a second — and
// never more than 10 in any second.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/examples/internal/recipe"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// SendWebhook delivers one webhook.
type SendWebhook struct{ WebhookID int64 }

// Kind names the job type.
func (SendWebhook) Kind() string { return "send_webhook" }

// limit: at most 10 in any second.
var limit = ratelimit.Limit[SendWebhook]{To: 10, Per: time.Second, Key: "global"}

// run works a backlog under the limit with the given burst, big enough to
// last the given number of seconds, and returns the time each claim was
// decided at: what the limit counts.
func run(ctx context.Context, s *store.Store, burst, seconds int) ([]time.Time, error) {
	reg := jobs.NewRegistry()
	lim := limit
	lim.Burst = burst
	var mu sync.Mutex
	var claims []time.Time
	n := burst + seconds*(limit.To-burst+1)
	done := make(chan struct{})
	err := jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SendWebhook]) error {
		return nil // deliver the webhook here
	}, jobs.RateLimit(lim))
	if err != nil {
		return nil, err
	}
	items := make([]jobs.Item, n)
	for i := range items {
		items[i] = jobs.Item{Args: SendWebhook{WebhookID: int64(i)}}
	}
	if _, err := jobs.NewClient(s, reg, jobs.ClientConfig{}).EnqueueMany(ctx, items); err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{Logger: quiet, Hooks: jobs.Hooks{OnClaim: func(e jobs.ClaimEvent) {
		mu.Lock()
		defer mu.Unlock()
		for range e.Claimed {
			claims = append(claims, e.DecidedAt)
		}
		if len(claims) == n {
			close(done)
		}
	}}})
	if err != nil {
		return nil, err
	}
	d, err := dispatcher.New(s, dispatcher.Config{Logger: quiet})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, r := range []func(context.Context) error{w.Run, d.Run} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = r(ctx) }()
	}
	select {
	case <-done:
	case <-time.After(time.Duration(seconds+10) * time.Second):
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return claims, nil
}

func main() {
	ctx := context.Background()
	for _, burst := range []int{2, 6} {
		s, closeFn, err := recipe.TempStore(ctx)
		if err != nil {
			log.Fatal(err)
		}
		claims, err := run(ctx, s, burst, 3)
		closeFn()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("burst %d: claims per second %v (after the burst the limit allows %d a second); busiest second %d (limit %d)\n",
			burst, perSecond(claims), limit.To-burst+1, ratelimit.BusiestWindow(claims, time.Second), limit.To)
	}
}

// perSecond counts the claims in each second from the first, on the wall
// clock the limit counts on (as ratelimit.BusiestWindow does): a
// monotonic reading the times may carry is stripped (Round(0)), or a
// second measured on it could hold 11 claims the limit saw in two.
func perSecond(claims []time.Time) []int {
	var out []int
	for _, t := range claims {
		i := int(t.Round(0).Sub(claims[0].Round(0)) / time.Second)
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i]++
	}
	return out
}
