package load

import (
	"bytes"
	"fmt"
	"time"

	"github.com/valyala/fastjson"

	"github.com/sglprof/runner/backends/simclock"
)

// Clock stamps the times of a run. The request loop and the response parsers take every time
// from it: when a scheduled request is sent, when each request starts, when each event of its
// response arrives, how long the run took. Which clock it is is the caller's choice (Config.Clock);
// the loop never asks.
type Clock interface {
	// Pace is the real time after the run's start at which a request due at schedule offset
	// at is sent.
	Pace(at time.Duration) time.Duration
	// Start stamps a request sent elapsed (real time) after the run's start, that was due at
	// due on this clock: its arrival, or later when it waited for a concurrency slot (the end
	// of the slot's previous request).
	Start(elapsed, due time.Duration) time.Duration
	// Event stamps a part of a response read elapsed (real time) after its request was sent:
	// ev is the part's JSON (a streamed event, a whole answer), nil for a part without one (a
	// stream's [DONE], a failure), and last is the request's previous stamp (0 before any).
	Event(elapsed time.Duration, ev *fastjson.Value, last time.Duration) time.Duration
	// End is the run's wall time: elapsed (real time) since its start, or its last request's
	// end on this clock, lastEnd.
	End(elapsed, lastEnd time.Duration) time.Duration
}

// RealClock measures on this machine's monotonic clock: every stamp is the real time elapsed.
type RealClock struct{}

// Pace is at: the schedule is real time.
func (RealClock) Pace(at time.Duration) time.Duration { return at }

// Start is the real time since the run's start.
func (RealClock) Start(elapsed, _ time.Duration) time.Duration { return elapsed }

// Event is the real time since the request was sent.
func (RealClock) Event(elapsed time.Duration, _ *fastjson.Value, _ time.Duration) time.Duration {
	return elapsed
}

// End is the real time since the run's start.
func (RealClock) End(elapsed, _ time.Duration) time.Duration { return elapsed }

// SimClock measures on a simulated server's clock (runner run --simulate), for servers that
// report their simulated times: the LLM simulator's streamed chunks carry the request's
// simulated time so far (simclock.ElapsedField). At the default time scale a simulated token
// is a few µs of real time, far below the loopback and scheduling noise a real clock would
// add, so on the real clock the noise would be the measurement.
//
// The arrival schedule is simulated time, slept at the simulator's scale so that requests
// overlap on the server as they would in simulated time (the server's batch, and so its
// decode cost, follows the real overlap); a request starts when it was due (a request that
// waited for a slot, when the slot's previous request ended there), and the run lasts until
// its last simulated completion.
type SimClock struct {
	// Scale is the simulator's real seconds per simulated second
	// (simclock.TimeScale of its environment).
	Scale float64
}

// Pace is at at the simulator's scale.
func (c SimClock) Pace(at time.Duration) time.Duration {
	return time.Duration(float64(at) * max(c.Scale, 0))
}

// Start is when the request was due.
func (SimClock) Start(_, due time.Duration) time.Duration { return due }

// Event is the simulated time the event reports, else (an event without one, [DONE], a
// failure) the request's previous stamp. A reported time never goes back before last, so no
// latency comes out negative.
func (SimClock) Event(_ time.Duration, ev *fastjson.Value, last time.Duration) time.Duration {
	if ev != nil {
		if ns := ev.Get(simclock.ElapsedField); ns != nil {
			return max(time.Duration(ns.GetInt64()), last)
		}
	}
	return last
}

// End is the last simulated completion.
func (SimClock) End(_, lastEnd time.Duration) time.Duration { return lastEnd }

// tagger is a Clock that marks a request body with the time it was due on the schedule (and the
// load run it belongs to): SimClock, for the LLM simulator (simclock.DueField).
type tagger interface {
	Tag(body []byte, run string, due time.Duration) []byte
}

// Tag adds simclock.DueField and simclock.RunField to a JSON object body; any other body is
// returned as it is.
func (SimClock) Tag(body []byte, run string, due time.Duration) []byte {
	if len(body) < 2 || body[0] != '{' {
		return body
	}
	head := fmt.Sprintf(`{"%s":%d,"%s":%q`, simclock.DueField, int64(due), simclock.RunField, run)
	rest := bytes.TrimLeft(body[1:], " \t\r\n")
	if len(rest) > 0 && rest[0] != '}' {
		head += ","
	}
	return append([]byte(head), rest...)
}
