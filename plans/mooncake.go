package plans

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DatasetMooncake is a Mooncake-style request trace: JSON Lines with arrival times, replayed at
// those times (load.dataset = "mooncake" with dataset_path).
const DatasetMooncake = "mooncake"

// MooncakeRecord is one request of a Mooncake trace, the layout of kvcache-ai/Mooncake's FAST25
// traces that sglang's bench_serving replays (python/sglang/benchmark/datasets/mooncake.py):
// the arrival in milliseconds since the trace's start, the prompt and output lengths in tokens,
// and the prompt's block hash ids (one per 512-token block; equal ids are equal blocks, so
// requests that share leading ids share a prefix).
type MooncakeRecord struct {
	Timestamp    int64   `json:"timestamp"`
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

// MooncakeBlock is the trace's block size in tokens.
const MooncakeBlock = 512

// Bounds of a trace, which is untrusted input: a line, a request's lengths, a record's hash ids
// (at most one per block of its input).
const (
	maxMooncakeLine   = 1 << 20
	MaxMooncakeTokens = 1 << 20
)

// ErrStopRecords is what fn returns to MooncakeRecords to stop reading without an error.
var ErrStopRecords = errors.New("enough records")

// MooncakeRecords streams a Mooncake trace's records to fn (line is the record's line number).
// Blank lines are skipped; a line that is not a record within the bounds is an error naming the
// file (name) and the line. The plan check and runner/load's dataset both read through it.
func MooncakeRecords(r io.Reader, name string, fn func(line int, rec MooncakeRecord) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxMooncakeLine)
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(trimSpace(b)) == 0 {
			continue
		}
		var rec MooncakeRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("%s:%d: %s", name, line, jsonProblem(err))
		}
		if err := rec.check(); err != nil {
			return fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if err := fn(line, rec); err != nil {
			if errors.Is(err, ErrStopRecords) {
				return nil
			}
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%s: a line is over %d KiB: not a Mooncake trace", name, maxMooncakeLine>>10)
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func (r MooncakeRecord) check() error {
	switch {
	case r.Timestamp < 0:
		return fmt.Errorf("timestamp %d: want milliseconds since the trace's start, >= 0", r.Timestamp)
	case r.InputLength < 1 || r.InputLength > MaxMooncakeTokens:
		return fmt.Errorf("input_length %d: want 1 to %d tokens", r.InputLength, MaxMooncakeTokens)
	case r.OutputLength < 1 || r.OutputLength > MaxMooncakeTokens:
		return fmt.Errorf("output_length %d: want 1 to %d tokens", r.OutputLength, MaxMooncakeTokens)
	case len(r.HashIDs) > (r.InputLength+MooncakeBlock-1)/MooncakeBlock:
		return fmt.Errorf("%d hash_ids for %d input tokens: at most one per %d-token block", len(r.HashIDs), r.InputLength, MooncakeBlock)
	}
	return nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
