package load

import (
	"fmt"
	"slices"
	"time"
)

// Load from several client processes ([load] clients = N): one arrival schedule, seeded as a
// single client's would be, is dealt round-robin (request i to client i mod N), each client
// sends its requests at their times in the whole schedule, and the clients' raw records are
// merged here. Every latency in a record (TTFT, each ITL, E2E) is measured by one client on its
// own clock, so no clock offset between clients enters a latency, and the merged records give
// exactly the percentiles one client would compute over the same records. Only the start
// offsets and the wall time come from different clocks: each client's from its own start (all
// clients start together, so they differ by the start-up skew, which the merged wall time
// bounds from above by taking the longest client's).

// ShardConcurrency is client k's share of a concurrency cap c across n clients: the shares sum
// to c, so the clients together keep at most c requests in flight (0 stays 0: no cap). A client
// whose share would be 0 gets 1 (the plan is refused when clients exceed the cap).
func ShardConcurrency(c, n, k int) int {
	if c <= 0 || n <= 1 {
		return c
	}
	share := c / n
	if k < c%n {
		share++
	}
	return max(share, 1)
}

// MergeShards joins the records of n clients (parts[k] from Shard k of Shards n) into one run's:
// sorted by request index, with the longest client's wall time. It refuses records that are not
// the client's to report or an index reported twice: a client that sent them did not follow its
// share of the schedule.
func MergeShards(parts [][]Record, walls []time.Duration) ([]Record, time.Duration, error) {
	n := len(parts)
	var out []Record
	var wall time.Duration
	seen := map[int]bool{}
	for k, p := range parts {
		for _, r := range p {
			if n > 1 && r.Index%n != k {
				return nil, 0, fmt.Errorf("client %d of %d reported request %d, which is client %d's", k, n, r.Index, r.Index%n)
			}
			if seen[r.Index] {
				return nil, 0, fmt.Errorf("client %d reported request %d twice", k, r.Index)
			}
			seen[r.Index] = true
			out = append(out, r)
		}
		if k < len(walls) {
			wall = max(wall, walls[k])
		}
	}
	slices.SortFunc(out, func(a, b Record) int { return a.Index - b.Index })
	return out, wall, nil
}
