package sim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// seqWords is n distinct tokens, as the prefix cache sees a prompt of token ids.
func seqWords(n int) []string {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i + 3
	}
	return promptWords(ids, "")
}

// SGLang's /flush_cache answers 400 with upstream's body while the scheduler has a request
// waiting, and keeps the cache; once none is left it answers 200 with the same body and the
// cache is empty.
func TestFlushCacheRefusedWhileRequestsWait(t *testing.T) {
	s := &server{p: parsedArgs{}, log: &logger{w: io.Discard}, llm: true}
	toks := seqWords(64)
	s.met.prefixLookup(toks, false)
	eng := s.llmEngine()
	eng.mu.Lock()
	eng.waiting = append(eng.waiting, &llmJob{in: 8, out: 1})
	eng.mu.Unlock()
	flush := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		s.flushCache(rec, httptest.NewRequest(http.MethodPost, "/flush_cache", nil))
		return rec
	}
	if rec := flush(); rec.Code != http.StatusBadRequest || rec.Body.String() != flushCacheBody {
		t.Errorf("with a request waiting: %d %q, want 400 and upstream's body", rec.Code, rec.Body.String())
	}
	if got := s.met.prefixLookup(toks, false); got != 64 {
		t.Errorf("a refused flush emptied the cache: hit %d, want 64", got)
	}
	eng.mu.Lock()
	eng.waiting = nil
	eng.mu.Unlock()
	if rec := flush(); rec.Code != http.StatusOK || rec.Body.String() != flushCacheBody {
		t.Errorf("idle: %d %q, want 200 and upstream's body", rec.Code, rec.Body.String())
	}
	if got := s.met.prefixLookup(toks, false); got != 0 {
		t.Errorf("after the flush the prompt hit %d tokens, want 0", got)
	}
}

// metricValue is a sample's value on a /metrics page (the first line of that name).
func metricValue(t *testing.T, base, name string) float64 {
	t.Helper()
	_, body := getBody(t, base+"/metrics")
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+"{") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no %s on the page:\n%s", name, body)
	return 0
}

// The simulated vLLM server mounts POST /reset_prefix_cache only in development mode
// (VLLM_SERVER_DEV_MODE=1), as vLLM's attach_router does; there it empties the prefix cache and
// answers 200 with no body. A value int() cannot read stops the server, as in vLLM.
func TestVLLMResetPrefixCache(t *testing.T) {
	env := baseEnv(t)
	plain := startVLLM(t, env, "serve", "m/M")
	plain.waitLog(t, "Application startup complete.")
	if code, _ := postJSON(t, plain.base+"/reset_prefix_cache", nil); code != http.StatusNotFound {
		t.Errorf("/reset_prefix_cache without VLLM_SERVER_DEV_MODE: %d, want 404", code)
	}

	dev := map[string]string{"VLLM_SERVER_DEV_MODE": "1"}
	for k, v := range env {
		dev[k] = v
	}
	s := startVLLM(t, dev, "serve", "m/M")
	s.waitLog(t, "Application startup complete.")
	prompt := make([]int, 64)
	for i := range prompt {
		prompt[i] = i + 11
	}
	complete := func() {
		if code, body := postJSON(t, s.base+"/v1/completions", map[string]any{"model": "m/M", "prompt": prompt, "max_tokens": 1}); code != 200 {
			t.Fatalf("/v1/completions: %d %s", code, body)
		}
	}
	const hits = "vllm:prefix_cache_hits_total"
	complete()
	complete()
	warm := metricValue(t, s.base, hits)
	if warm != 64 {
		t.Fatalf("the second request hit %v tokens, want 64", warm)
	}
	if code, body := postJSON(t, s.base+"/reset_prefix_cache", nil); code != http.StatusOK || len(body) != 0 {
		t.Errorf("/reset_prefix_cache in development mode: %d %q, want 200 and no body", code, body)
	}
	complete()
	if got := metricValue(t, s.base, hits); got != warm {
		t.Errorf("after the reset the same prompt hit %v more tokens, want 0", got-warm)
	}

	bad := map[string]string{"VLLM_SERVER_DEV_MODE": "true"}
	for k, v := range env {
		bad[k] = v
	}
	var stderr lockedBuf
	if rc := vllmLLMMain(t.Context(), []string{"serve", "m/M", "--port", strconv.Itoa(freeTestPort(t))}, bad, io.Discard, &stderr); rc != 1 ||
		!strings.Contains(stderr.String(), "ValueError: invalid literal for int() with base 10: 'true'") {
		t.Errorf("VLLM_SERVER_DEV_MODE=true: rc %d, stderr %s", rc, stderr.String())
	}
}
