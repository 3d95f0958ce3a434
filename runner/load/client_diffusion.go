package load

// The whole-body requests: the diffusion server's images and videos (a videos job polled until
// it ends) and non-streamed LLM requests. The response is read whole (at most
// MaxResponseBody) and only the fields a record keeps are decoded.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/valyala/fastjson"
)

// APIs of the diffusion server (Build); the LLM APIs are in client_llm.go.
const (
	APIImages = "images" // POST /v1/images/generations
	APIVideos = "videos" // POST /v1/videos, then GET /v1/videos/{id} until completed|failed
)

// Spec describes the requests of one cell.
type Spec struct {
	API    string
	Model  string
	Prompt string
	// Diffusion.
	Width, Height int
	Steps         int
	Seed          int64
	N             int // images per request; 0 = 1
	// LLM.
	InputLen, OutputLen int
	// PerfDumpDir, when set, asks the diffusion server for a perf dump per measured request
	// (the perf_dump_path field) at PerfDumpDir/request-<i>.json.
	PerfDumpDir string
}

// PerfDumpPath is the perf dump of measured request i under dir.
func PerfDumpPath(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("request-%03d.json", i))
}

// BuildIndexed is Build for measured request i: it also names the request's perf dump.
func BuildIndexed(spec Spec, i int, measured bool) (Request, error) {
	if !measured || spec.PerfDumpDir == "" || (spec.API != APIImages && spec.API != APIVideos) {
		return Build(spec, measured)
	}
	r, err := Build(spec, measured)
	if err != nil {
		return r, err
	}
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		return r, err
	}
	m["perf_dump_path"] = PerfDumpPath(spec.PerfDumpDir, i)
	r.Body, _ = json.Marshal(m)
	return r, nil
}

// Build returns the request for spec; measured says whether per-request profiling fields are
// sent (warmup requests are never profiled).
func Build(spec Spec, measured bool) (Request, error) {
	switch spec.API {
	case APIImages, APIVideos:
		body := map[string]any{"prompt": spec.Prompt, "seed": spec.Seed, "n": max(spec.N, 1)}
		if spec.Model != "" {
			body["model"] = spec.Model
		}
		if spec.Width > 0 && spec.Height > 0 {
			body["size"] = fmt.Sprintf("%dx%d", spec.Width, spec.Height)
			body["width"], body["height"] = spec.Width, spec.Height
		}
		if spec.Steps > 0 {
			body["num_inference_steps"] = spec.Steps
		}
		if spec.API == APIImages {
			body["response_format"] = "b64_json"
		}
		// No per-request profiling fields: upstream's image handler forwards none, so the
		// runner profiles diffusion servers with a /start_profile window instead.
		b, _ := json.Marshal(body)
		if spec.API == APIVideos {
			return Request{Method: "POST", Path: "/v1/videos", Body: b, Images: max(spec.N, 1), Poll: true}, nil
		}
		return Request{Method: "POST", Path: "/v1/images/generations", Body: b, Images: max(spec.N, 1)}, nil
	case APIGenerate, APICompletions:
		if spec.OutputLen <= 0 {
			return Request{}, fmt.Errorf("load: api %q needs output_len > 0 (matrix.output_len)", spec.API)
		}
		prompt := SyntheticPrompt(spec.Prompt, spec.InputLen)
		var b []byte
		if spec.API == APIGenerate {
			b, _ = json.Marshal(map[string]any{"text": prompt, "sampling_params": map[string]any{"max_new_tokens": spec.OutputLen, "temperature": 0, "ignore_eos": true}})
			return Request{Method: "POST", Path: "/generate", Body: b, Tokens: spec.OutputLen}, nil
		}
		body := map[string]any{"prompt": prompt, "max_tokens": spec.OutputLen, "temperature": 0, "ignore_eos": true}
		if spec.Model != "" {
			body["model"] = spec.Model
		}
		b, _ = json.Marshal(body)
		return Request{Method: "POST", Path: "/v1/completions", Body: b, Tokens: spec.OutputLen}, nil
	}
	return Request{}, fmt.Errorf("load: unknown api %q; use images, videos, generate or completions", spec.API)
}

// SyntheticPrompt returns a prompt of about n tokens: the given prompt's words repeated (or a
// fixed word when there is none). Word count approximates tokens, which is what bench_serving's
// random dataset does too; the exact count is what the server reports back.
func SyntheticPrompt(prompt string, n int) string {
	if n <= 0 {
		if prompt == "" {
			return "Hello"
		}
		return prompt
	}
	words := strings.Fields(prompt)
	if len(words) == 0 {
		words = []string{"hello"}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = words[i%len(words)]
	}
	return strings.Join(out, " ")
}

// doWhole sends a whole-body request (and polls a videos job) and records it.
func (l *loader) doWhole(ctx context.Context, w *worker, req Request, t0 time.Time, rec *Record) error {
	var v *fastjson.Value // the answer, parsed, for the clock
	p := l.pp.Get()
	defer l.pp.Put(p)
	defer func() { rec.Latency = l.clock.Event(time.Since(t0), v, 0) }()
	tr := l.transport(req)
	status, body, n, err := l.whole(ctx, tr, w, req.Method, req.Path, req.Body)
	rec.Status, rec.Bytes = status, n
	if err == nil && status >= 200 && status < 300 && req.Poll {
		id := fastjson.GetString(body, "id")
		if id == "" {
			err = errors.New("video job response without an id")
		}
		for err == nil {
			// Terminal states: completed, failed, and cancelled (a job cancelled on the server
			// never completes, so polling on would only end at the request timeout).
			st := fastjson.GetString(body, "status")
			if st == "completed" || st == "failed" || st == "cancelled" {
				switch st {
				case "failed":
					err = fmt.Errorf("video job %s failed: %s", id, clip(fastjson.GetString(body, "error", "message")))
					rec.Body = clipBody(body)
				case "cancelled":
					err = fmt.Errorf("video job %s was cancelled on the server; check the server log for who cancelled it", id)
					rec.Body = clipBody(body)
				}
				break
			}
			select {
			case <-ctx.Done():
				err = fmt.Errorf("video job %s: %w", id, ctx.Err())
				continue
			case <-time.After(l.poll):
			}
			var pn int64
			status, body, pn, err = l.whole(ctx, tr, w, "GET", "/v1/videos/"+id, nil)
			rec.Bytes += pn
			rec.Status = status
			if err == nil && (status < 200 || status >= 300) {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	if status < 200 || status >= 300 {
		rec.Body = clipBody(body)
		return httpError(status, body)
	}
	if pv, err := p.ParseBytes(body); err == nil {
		v = pv
	}
	parseResponse(rec, v)
	if msg := checkReported(rec, req); msg != "" {
		return violationf("%s", msg)
	}
	if rec.Images == 0 {
		rec.Images = req.Images
	}
	if rec.OutputTokens == 0 {
		rec.OutputTokens = req.Tokens
	}
	return nil
}

// whole sends one request and reads its response into w.buf, which the worker reuses (a
// fresh io.ReadAll buffer per response was the largest single allocation of the client). The
// body returned aliases w.buf. A redirect is read, then fails the request.
func (l *loader) whole(ctx context.Context, tr transport, w *worker, method, path string, body []byte) (int, []byte, int64, error) {
	resp, err := tr.roundTrip(ctx, w, method, path, body, false)
	if err != nil {
		return 0, nil, 0, err
	}
	b, err := readBody(resp.Body, w.buf[:0])
	resp.Body.Close()
	w.buf = b
	if err == nil {
		err = redirected(resp)
	}
	return resp.StatusCode, b, int64(len(b)), err
}

// checkReported checks what a successful response reported against what its request asked:
// no count or time below zero, no more images than n, no more tokens than max_tokens. It says
// what is wrong, or "".
func checkReported(rec *Record, req Request) string {
	switch {
	case rec.OutputTokens < 0:
		return fmt.Sprintf("server reported %d completion tokens; a count cannot be negative", rec.OutputTokens)
	case req.Tokens > 0 && rec.OutputTokens > req.Tokens:
		return fmt.Sprintf("server reported %d completion tokens for a request of max_tokens %d", rec.OutputTokens, req.Tokens)
	case req.Images > 0 && rec.Images > req.Images:
		return fmt.Sprintf("server returned %d images for a request of n = %d", rec.Images, req.Images)
	case rec.InferenceTimeS < 0:
		return fmt.Sprintf("server reported inference_time_s %g; a time cannot be negative", rec.InferenceTimeS)
	case rec.PeakMemoryMB < 0:
		return fmt.Sprintf("server reported peak_memory_mb %g; a memory size cannot be negative", rec.PeakMemoryMB)
	}
	return ""
}

// parseResponse records what a successful response says about itself: its id (images,
// videos, /v1/completions: "id"; /generate: meta_info.id), the server-reported inference time
// and peak memory, the number of images and of generated tokens. A body that is not JSON
// (v nil) leaves the record as it is.
func parseResponse(rec *Record, v *fastjson.Value) {
	if v == nil {
		return
	}
	rec.ID = string(v.GetStringBytes("id"))
	if rec.ID == "" {
		rec.ID = string(v.GetStringBytes("meta_info", "id"))
	}
	rec.InferenceTimeS = finite(v.GetFloat64("inference_time_s"))
	rec.PeakMemoryMB = finite(v.GetFloat64("peak_memory_mb"))
	if d := v.GetArray("data"); d != nil {
		rec.Images = len(d)
	}
	rec.OutputTokens = v.GetInt("meta_info", "completion_tokens")
	if rec.OutputTokens == 0 {
		rec.OutputTokens = v.GetInt("usage", "completion_tokens")
	}
}

// finite maps NaN and ±Inf (1e999 in a response) to 0: they cannot be written as JSON.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}
