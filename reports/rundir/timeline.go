package rundir

import (
	"bufio"
	"encoding/json"
	"fmt"
	"path/filepath"
)

// LLMSpan is one request of an LLM cell's llm_requests.jsonl as a timeline draws it: when it
// was sent (from the measurement's start), its TTFT and its end-to-end latency, in ns, and
// its error ("" when it completed).
type LLMSpan struct {
	StartNS   int64  `json:"start_ns"`
	TTFTNS    int64  `json:"ttft_ns"`
	LatencyNS int64  `json:"latency_ns"`
	Error     string `json:"error"`
}

// MaxLLMSpans is the most requests ReadLLMSpans returns: a timeline of more is unreadable, and a
// run directory's file may be as long as anyone made it.
const MaxLLMSpans = 500

// ReadLLMSpans reads the first MaxLLMSpans requests of the cell's llm_requests.jsonl and counts
// the rest. A missing file is os.Open's error (errors.Is fs.ErrNotExist); a line that is not a
// request record is an error naming it.
func ReadLLMSpans(cellDir string) (spans []LLMSpan, more int, err error) {
	path := filepath.Join(cellDir, LLMRecordsFile)
	f, err := OpenFile(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 64<<20) // an ITL list is long for a long output
	for line := 1; sc.Scan(); line++ {
		if len(spans) == MaxLLMSpans {
			more++
			continue
		}
		var s LLMSpan
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return spans, more, fmt.Errorf("%s:%d: not a request record: %w", path, line, err)
		}
		spans = append(spans, s)
	}
	if err := sc.Err(); err != nil {
		return spans, more, fmt.Errorf("%s: %w", path, err)
	}
	return spans, more, nil
}
