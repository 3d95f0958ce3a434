package load

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/sglprof/runner/backends/simclock"
	"github.com/valyala/fastjson"
)

// simStub streams /generate's layout with the simulator's clock key: token k (1-based) at
// first + (k−1)·gap of simulated time, then [DONE] without a time.
func simStub(t *testing.T, tokens int, first, gap time.Duration) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for k := 1; k <= tokens; k++ {
			fmt.Fprintf(w, "data: {\"text\":\"t\",\"meta_info\":{\"prompt_tokens\":4,\"completion_tokens\":%d},%q:%d}\n\n",
				k, simclock.ElapsedField, first+time.Duration(k-1)*gap)
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// On SimClock every time of a record is the simulated server's: TTFT, ITLs and latency from
// the events' sim_elapsed_ns; a request starts when it was due on the simulated clock (its
// arrival, or when its concurrency slot's previous request ended there); the run lasts until
// the last simulated completion. Nothing of the real clock's loopback noise enters.
func TestSimClockStampsTheServersTimes(t *testing.T) {
	const ms = time.Millisecond
	base := simStub(t, 4, 10*ms, 2*ms) // TTFT 10 ms, 3 ITLs of 2 ms, E2E 16 ms
	check := func(t *testing.T, rs []Record) {
		t.Helper()
		for _, r := range rs {
			if !r.OK() || r.TTFT != 10*ms || r.Latency != 16*ms || !slices.Equal(r.ITL, []time.Duration{2 * ms, 2 * ms, 2 * ms}) {
				t.Fatalf("record %+v: want TTFT 10 ms, ITLs of 2 ms, latency 16 ms", r)
			}
		}
	}
	t.Run("slots", func(t *testing.T) {
		rs, wall, err := Run(context.Background(), llm(t, base, APIGenerate, "", RandomPrompts(1, 4, 4, 1, 1),
			Config{Requests: 3, Concurrency: 1, Clock: SimClock{}}))
		if err != nil {
			t.Fatal(err)
		}
		check(t, rs)
		for i, r := range rs {
			if r.Start != time.Duration(i)*16*ms {
				t.Errorf("request %d started at %s, want when the one before ended: %s", i, r.Start, time.Duration(i)*16*ms)
			}
		}
		if wall != 48*ms {
			t.Errorf("wall %s, want the last simulated completion, 48 ms", wall)
		}
	})
	t.Run("arrivals", func(t *testing.T) {
		// 10 requests/s at a fixed interval: due at 100, 200 and 300 ms of simulated time.
		// Scale 0.01 sleeps 1, 2 and 3 ms of it.
		rs, wall, err := Run(context.Background(), llm(t, base, APIGenerate, "", RandomPrompts(1, 4, 4, 1, 1),
			Config{Requests: 3, Rate: 10, Burstiness: math.Inf(1), Clock: SimClock{Scale: 0.01}}))
		if err != nil {
			t.Fatal(err)
		}
		check(t, rs)
		for i, r := range rs {
			// The schedule's float arithmetic may leave a nanosecond off.
			if want := time.Duration(i+1) * 100 * ms; (r.Start - want).Abs() > time.Microsecond {
				t.Errorf("request %d started at %s, want its arrival %s", i, r.Start, want)
			}
		}
		if (wall - 316*ms).Abs() > time.Microsecond {
			t.Errorf("wall %s, want 316 ms", wall)
		}
	})
}

// A simulated time that goes back, or is not a number, never makes a latency negative.
func TestSimClockNeverGoesBack(t *testing.T) {
	var c SimClock
	for _, ev := range []string{`{"sim_elapsed_ns":-5}`, `{"sim_elapsed_ns":"x"}`, `{}`} {
		v := parsed(&fastjson.Parser{}, ev)
		if got := c.Event(time.Hour, v, 7); got != 7 {
			t.Errorf("%s after 7 ns: %s, want 7ns", ev, got)
		}
	}
	if got := c.Event(time.Hour, parsed(&fastjson.Parser{}, `{"sim_elapsed_ns":9}`), 7); got != 9 {
		t.Errorf("9 ns after 7: %s", got)
	}
	if c.Pace(time.Second) != 0 || (SimClock{Scale: 0.5}).Pace(time.Second) != 500*time.Millisecond {
		t.Error("Pace does not scale")
	}
}

// SimClock.Tag puts the schedule's due time and the run in front of a JSON object's keys, and
// leaves an empty object valid and any other body alone.
func TestSimClockTag(t *testing.T) {
	c := SimClock{Scale: 0.002}
	for in, want := range map[string]string{
		`{"input_ids":[1,2],"stream":true}`: `{"sim_due_ns":1500,"sim_run":"r1","input_ids":[1,2],"stream":true}`,
		`{ }`:                               `{"sim_due_ns":1500,"sim_run":"r1"}`,
		`[1]`:                               `[1]`,
		``:                                  ``,
	} {
		if got := string(c.Tag([]byte(in), "r1", 1500)); got != want {
			t.Errorf("Tag(%q) = %q, want %q", in, got, want)
		}
	}
}
