// Command backlog-keeps-up is the recipe for a backlog that has to drain at
// the declared rate: at most 10 in any second, draining at 10 − 6 + 1 = 5 a
// second.
//
// A backlog comes back through the dispatcher, which promotes due jobs once
// per poll (1 s by default), and a claim takes them together; the burst
// must cover the polls: burst ≥ (dispatcher poll + worker poll) / T,
// rounded up, and at least 2. For 10 per second that is 5 × 1.1 = 5.5,
// rounded up to 6. The program shows the rule at work: with burst 6 the
// backlog drains at 5 a second; with burst 2 (which would allow 9 a second)
// it falls behind, to 2 a second, because each poll can admit only the
// burst.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicequeue/sluice/examples/internal/recipe"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// SendWebhook delivers one webhook.
type SendWebhook struct{ WebhookID int64 }

// Kind names the job type.
func (SendWebhook) Kind() string { return "send_webhook" }

// limit: at most 10 in any second; a burst of 6 covers a 1 s dispatcher
// poll and a 0.1 s worker poll.
var limit = ratelimit.Limit[SendWebhook]{To: 10, Per: time.Second, Burst: 6, Key: "global"}

// run works a backlog of 100 webhooks under the limit with the given burst
// for 10 s of fake time, the dispatcher polling every second, and returns
// the claims in each second.
func run(ctx context.Context, s *store.Store, burst int) ([]int, error) {
	reg, l := jobs.NewRegistry(), recipe.NewLog()
	lim := limit
	lim.Burst = burst
	err := jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SendWebhook]) error {
		l.Admit("send_webhook/global") // deliver the webhook here
		return nil
	}, jobs.RateLimit(lim))
	if err != nil {
		return nil, err
	}
	items := make([]jobs.Item, 100)
	for i := range items {
		items[i] = jobs.Item{Args: SendWebhook{WebhookID: int64(i)}}
	}
	if err := recipe.Simulate(ctx, s, reg, l, items, time.Second, 10*time.Second); err != nil {
		return nil, err
	}
	return recipe.PerWindow(l.All(), time.Second, 10), nil
}

func main() {
	ctx := context.Background()
	for _, burst := range []int{6, 2} {
		s, closeFn, err := recipe.TempStore(ctx)
		if err != nil {
			log.Fatal(err)
		}
		perSecond, err := run(ctx, s, burst)
		closeFn()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("burst %d: claims per second %v (the limit allows %d a second)\n", burst, perSecond, limit.To-burst+1)
	}
}
