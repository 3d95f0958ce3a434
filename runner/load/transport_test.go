package load

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// transports are the HTTP clients a run can be given.
var transports = []Transport{TransportH1, TransportNetHTTP}

// Either HTTP client carries either kind of request, with the same records; the automatic
// choice takes the own client for whole-body requests and net/http for streams.
func TestTransportsCarryBothKinds(t *testing.T) {
	var mu sync.Mutex
	agents := map[string]string{} // path -> User-Agent of the last request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		agents[r.URL.Path] = r.Header.Get("User-Agent")
		mu.Unlock()
		if r.URL.Path == "/generate" {
			w.Header().Set("Content-Type", "text/event-stream")
			for k := 1; k <= 3; k++ {
				fmt.Fprintf(w, "data: {\"text\":\"t\",\"meta_info\":{\"prompt_tokens\":4,\"completion_tokens\":%d}}\n\n", k)
			}
			io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		io.WriteString(w, `{"id":"i","data":[{"b64_json":"x"}],"inference_time_s":0.5}`)
	}))
	defer srv.Close()
	agent := func(path string) string {
		mu.Lock()
		defer mu.Unlock()
		return agents[path]
	}
	images := func(int, bool) (Request, error) { return Build(Spec{API: APIImages, Prompt: "p"}, true) }
	for _, tr := range append([]Transport{TransportAuto}, transports...) {
		name := string(tr)
		if tr == TransportAuto {
			name = "auto"
		}
		t.Run(name, func(t *testing.T) {
			rs, _, err := Run(context.Background(), llm(t, srv.URL, APIGenerate, "", RandomPrompts(2, 4, 3, 1, 1),
				Config{Requests: 4, Concurrency: 2, Transport: tr}))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if !r.OK() || r.OutputTokens != 3 || len(r.ITL) != 2 || r.InputTokens != 4 || r.Bytes == 0 {
					t.Fatalf("stream record %+v", r)
				}
			}
			sum, recs, err := runSummarized(context.Background(), Config{BaseURL: srv.URL, Requests: 4, Concurrency: 2, Transport: tr, Build: images})
			if err != nil || sum.Errors != 0 || recs[0].Images != 1 || recs[0].InferenceTimeS != 0.5 {
				t.Fatalf("images: err %v summary %+v record %+v", err, sum, recs[0])
			}
			streamAgent, wholeAgent := "Go-http-client", "runner-load" // TransportAuto
			switch tr {
			case TransportH1:
				streamAgent = "runner-load"
			case TransportNetHTTP:
				wholeAgent = "Go-http-client"
			}
			if !strings.HasPrefix(agent("/generate"), streamAgent) || !strings.HasPrefix(agent("/v1/images/generations"), wholeAgent) {
				t.Errorf("streams went through %q, whole bodies through %q; want %s and %s", agent("/generate"), agent("/v1/images/generations"), streamAgent, wholeAgent)
			}
		})
	}
}

func TestTransportConfigErrors(t *testing.T) {
	build := func(int, bool) (Request, error) { return Request{}, nil }
	for _, cfg := range []Config{
		{BaseURL: "https://127.0.0.1:1", Transport: TransportH1, Requests: 1, Build: build},
		{BaseURL: "http://127.0.0.1:1", Transport: "h3", Requests: 1, Build: build},
		{BaseURL: "http://127.0.0.1:1", Build: build},
		{BaseURL: "http://127.0.0.1:1", Requests: 1},
	} {
		if _, _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}
