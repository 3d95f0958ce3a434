package load

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"slices"
	"time"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/plans/infile"
)

// MaxTraceTokens bounds the prompt tokens a Mooncake trace replay holds in memory (all its
// requests' token ids are built before the clock starts).
const MaxTraceTokens = 1 << 26

// MooncakePrompts reads the first n requests (all when n <= 0) of a Mooncake trace and returns
// their prompts and arrival times: the trace's timestamps relative to its earliest, times
// slowdown (bench_serving's mooncake_slowdown_factor; 0 means 1), in arrival order. A prompt is
// token ids, exact in length: block j of a request's input (512 tokens) is made from its hash id
// j, so requests sharing leading hash ids share a prefix, as in the trace; tokens past the
// trace's hash ids are the request's own. A file that is not a trace is an error naming it and
// its first bad line.
func MooncakePrompts(path string, n int, slowdown float64) ([]Prompt, []time.Duration, error) {
	f, err := infile.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("mooncake dataset: %w", err)
	}
	defer f.Close()
	return readMooncake(f, path, n, slowdown)
}

func readMooncake(r io.Reader, name string, n int, slowdown float64) ([]Prompt, []time.Duration, error) {
	if !(slowdown > 0) || math.IsInf(slowdown, 0) {
		slowdown = 1
	}
	type req struct {
		rec  plans.MooncakeRecord
		line int
	}
	var reqs []req
	total := 0
	err := plans.MooncakeRecords(r, name, func(line int, rec plans.MooncakeRecord) error {
		if total += rec.InputLength; total > MaxTraceTokens {
			return fmt.Errorf("%s:%d: the requests so far hold over %d prompt tokens; replay fewer ([load] requests)", name, line, MaxTraceTokens)
		}
		reqs = append(reqs, req{rec, line})
		if n > 0 && len(reqs) >= n {
			return plans.ErrStopRecords
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(reqs) == 0 {
		return nil, nil, errors.New(name + ": no requests")
	}
	slices.SortStableFunc(reqs, func(a, b req) int { return cmp.Compare(a.rec.Timestamp, b.rec.Timestamp) })
	t0 := reqs[0].rec.Timestamp
	prompts := make([]Prompt, len(reqs))
	arrivals := make([]time.Duration, len(reqs))
	for i, q := range reqs {
		ms := float64(q.rec.Timestamp-t0) * slowdown
		if ms > float64(math.MaxInt64/int64(time.Millisecond)) {
			return nil, nil, fmt.Errorf("%s:%d: timestamp %d ms is beyond any replay", name, q.line, q.rec.Timestamp)
		}
		arrivals[i] = time.Duration(ms * float64(time.Millisecond))
		ids := traceIDs(q.rec, q.line)
		prompts[i] = Prompt{IDs: ids, Text: idsText(ids), InputLen: len(ids), OutputLen: q.rec.OutputLength}
	}
	return prompts, arrivals, nil
}

// traceIDs is a trace request's prompt as token ids: block j from hash id j (the same id gives
// the same block in every request), the rest from the request's line (its own tokens).
func traceIDs(rec plans.MooncakeRecord, line int) []int {
	ids := make([]int, rec.InputLength)
	for j := 0; j*plans.MooncakeBlock < len(ids); j++ {
		key := -int64(line) // a namespace of the request's own: no hash id is negative in a trace
		if j < len(rec.HashIDs) {
			key = rec.HashIDs[j]
		}
		h := fnv.New64a()
		var b [8]byte
		for k := range b {
			b[k] = byte(uint64(key) >> (8 * k))
		}
		h.Write(b[:])
		if key < 0 {
			h.Write([]byte{byte(j), byte(j >> 8), byte(j >> 16)})
		}
		seed := h.Sum64()
		for t := j * plans.MooncakeBlock; t < min(len(ids), (j+1)*plans.MooncakeBlock); t++ {
			seed = seed*6364136223846793005 + 1442695040888963407 // one LCG step a token
			ids[t] = vocabLow + int((seed>>33)%uint64(vocabHigh-vocabLow))
		}
	}
	return ids
}
