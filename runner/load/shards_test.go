package load

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprof/runner/reports/rundir"
)

// records are a run's records with varied latencies, some failed.
func records(n int) []Record {
	out := make([]Record, n)
	for i := range out {
		ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
		r := Record{Index: i, Status: 200, Start: ms(i * 37 % 500), TTFT: ms(10 + i*13%41), InputTokens: 100 + i, OutputTokens: 4}
		r.ITL = []time.Duration{ms(5 + i%7), ms(6 + i*3%11), ms(4 + i%5)}
		r.Latency = r.TTFT + r.ITL[0] + r.ITL[1] + r.ITL[2]
		if i%11 == 5 {
			r = Record{Index: i, Status: 500, Start: r.Start, Latency: ms(3), Error: "HTTP 500"}
		}
		out[i] = r
	}
	return out
}

// The clients' records, merged, give exactly the statistics one client gives over the same
// records: every percentile, mean, goodput and throughput.
func TestMergeShardsExact(t *testing.T) {
	all := records(101)
	slo := rundir.LLMSLO{TTFT: 40 * time.Millisecond}
	want := SummarizeLLM(all, 2*time.Second, slo, false)
	for _, n := range []int{2, 3} {
		parts := make([][]Record, n)
		walls := make([]time.Duration, n)
		for _, r := range all {
			parts[r.Index%n] = append(parts[r.Index%n], r)
		}
		walls[n-1] = 2 * time.Second // the longest client's wall is the run's
		merged, wall, err := MergeShards(parts, walls)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, SummarizeLLM(merged, wall, slo, false)); d != "" {
			t.Errorf("%d clients: merged summary differs (-one +merged):\n%s", n, d)
		}
	}
	// A client that reports another's request, or one twice, did not follow its share.
	if _, _, err := MergeShards([][]Record{{{Index: 1}}, nil}, nil); err == nil {
		t.Error("client 0 reported request 1")
	}
	if _, _, err := MergeShards([][]Record{{{Index: 0}, {Index: 0}}, nil}, nil); err == nil {
		t.Error("a request reported twice")
	}
}

// Each client sends its share of the one schedule (request i to client i mod n) at the times the
// whole schedule gives them.
func TestShardsSplitTheSchedule(t *testing.T) {
	url := serve(t, &stub{outTokens: 2})
	const n, reqs = 2, 9
	sched := Schedule(reqs, 50, 1, 7)
	parts := make([][]Record, n)
	walls := make([]time.Duration, n)
	for k := range n {
		cfg := llm(t, url, APIGenerate, "", RandomPrompts(reqs, 4, 2, 1, 1), Config{Requests: reqs, Rate: 50, Seed: 7,
			Clock: SimClock{Scale: 0.01}, Shard: k, Shards: n})
		rs, wall, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Index%n != k || r.Start != sched[r.Index] || !r.OK() {
				t.Errorf("client %d: request %d at %s (%s), want only its own at %s", k, r.Index, r.Start, r.Error, sched[r.Index])
			}
		}
		parts[k], walls[k] = rs, wall
	}
	merged, _, err := MergeShards(parts, walls)
	if err != nil || len(merged) != reqs {
		t.Fatalf("%d merged records, %v", len(merged), err)
	}
	for i, r := range merged {
		if r.Index != i {
			t.Fatalf("merged out of order at %d", i)
		}
	}
}

func TestShardConcurrency(t *testing.T) {
	for _, c := range []struct{ c, n, sum int }{{64, 2, 64}, {7, 3, 7}, {0, 4, 0}, {5, 1, 5}} {
		sum := 0
		for k := range c.n {
			sum += ShardConcurrency(c.c, c.n, k)
		}
		if sum != c.sum {
			t.Errorf("ShardConcurrency(%d, %d, ·) sums to %d", c.c, c.n, sum)
		}
	}
}
