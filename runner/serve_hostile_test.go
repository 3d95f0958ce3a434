package runner

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/reports/rundir"
)

// TestServeHostileServerCounts: an attached server whose stream reports counts it was not asked
// for fails those requests with the reason, and the cell is failed with a server-protocol
// reason even under a max_error_rate that would excuse the failed requests themselves. One
// /generate event of 50 million tokens made the client append 50 million ITLs (the runner at
// 5 GB; 2e9 ran it out of memory) and the cell was ok; a chat usage of -5 tokens gave
// output_throughput = -9821 and an ok cell. The per-request records stay small: at most
// output_len ITLs a request.
func TestServeHostileServerCounts(t *testing.T) {
	for _, tc := range []struct{ name, api, stream, want string }{
		{"generate 50 million tokens", "generate",
			"data: {\"text\":\"a\",\"meta_info\":{\"prompt_tokens\":8,\"completion_tokens\":1}}\n\n" +
				"data: {\"text\":\"ab\",\"meta_info\":{\"prompt_tokens\":8,\"completion_tokens\":50000000}}\n\ndata: [DONE]\n\n",
			"server reported 50000000 completion tokens for a request of max_tokens 4"},
		{"chat usage of -5 tokens", "chat",
			"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":-5}}\n\ndata: [DONE]\n\n",
			"server reported -5 completion tokens; a count cannot be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {})
			mux.HandleFunc("/get_server_info", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"model_path": "m"}`) })
			sse := func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, tc.stream)
			}
			mux.HandleFunc("/generate", sse)
			mux.HandleFunc("/v1/chat/completions", sse)
			srv := httptest.NewServer(mux)
			defer srv.Close()
			p := testPlan(t, `
name = "hostile"
[backend]
mode = "serve"
model_type = "llm"
url = "`+srv.URL+`"
ready_timeout = "10s"
[matrix]
model = ["m"]
prompt = ["hi"]
input_len = [8]
output_len = [4]
[load]
api = "`+tc.api+`"
warmup = 0
requests = 2
max_error_rate = 1
`)
			opts := simOptions(t)
			opts.Exe = "/nonexistent/runner"
			sum, err := Run(context.Background(), p, opts)
			if err != nil {
				t.Fatal(err)
			}
			r := serveResult(t, sum, sum.Cells[0].ID)
			if r.Verdict != plans.VerdictFailed || len(r.Reasons) == 0 || r.Reasons[0].Code != "server-protocol" ||
				!strings.Contains(r.Reasons[0].Message, "2 of 2 requests") || !strings.Contains(r.Reasons[0].Message, tc.want) {
				t.Fatalf("verdict %s reasons %+v: want failed, server-protocol naming %q", r.Verdict, r.Reasons, tc.want)
			}
			if l := r.Serve.LLM; l == nil || l.Completed != 0 || l.Failed != 2 || l.OutputThroughput != 0 || l.TotalOutput != 0 {
				t.Fatalf("LLM summary %+v: the violating requests must not count", l)
			}
			if ld := r.Serve.Load; ld == nil || ld.ProtocolViolations != 2 || ld.FirstViolation != tc.want {
				t.Fatalf("load summary %+v", ld)
			}
			fi, err := os.Stat(filepath.Join(rundir.CellDir(sum.RunDir, r.ID), rundir.LLMRecordsFile))
			if err != nil || fi.Size() > 4<<10 {
				t.Fatalf("per-request records: %v, %d bytes for 2 requests of 4 tokens", err, fi.Size())
			}
		})
	}
}
