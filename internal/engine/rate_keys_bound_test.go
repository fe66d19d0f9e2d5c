package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A job's rate-limit keys are kept in one column, which MySQL's TEXT
// bounds at 65,535 bytes; a server not in strict mode cut a longer list
// short, and the job then drew on budgets no limit named. The enqueue
// refuses such a job, naming the bound, on every database; a list of
// exactly 65,535 bytes is kept whole.
func TestAJobsRateKeysAreKeptWholeOrRefused(t *testing.T) {
	keys := func(n int) []engine.RateKey {
		ks := make([]engine.RateKey, n)
		for i := range ks {
			// 255 bytes each: 256 of them and their newlines are 65,535.
			ks[i] = engine.RateKey{Key: fmt.Sprintf("k%03d/", i) + strings.Repeat("x", 250), Cost: 1}
		}
		return ks
	}
	require.Len(t, engine.EncodeRateKeys(keys(256)), engine.MaxRateKeysBytes)
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		job := func(ks []engine.RateKey) engine.NewJob {
			return engine.NewJob{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1, RateKeys: ks}
		}
		res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{job(keys(256))})
		require.NoError(t, err)
		j, err := s.GetJob(ctx, res[0].ID)
		require.NoError(t, err)
		require.Equal(t, keys(256), j.RateKeys, "kept whole")

		_, err = s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{job(keys(257))})
		require.ErrorContains(t, err, "257 rate-limit keys take 65791 bytes")
		heavy := keys(256)
		heavy[0].Cost = 7 // "\t7" makes it 65,537
		_, err = s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{job(heavy)})
		require.ErrorContains(t, err, "at most 65535")
	})
}
