package load

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglprof/runner/reports/rundir"
)

// helperEnv switches the test binary into a trivial HTTP server (see TestMain): the
// benchmarks drive a handler in another process, as the "local HTTP handler" is,
// so that the server's goroutines and garbage collector do not share the client's.
const helperEnv = "RUNNER_LOAD_TEST_SERVER"

func TestMain(m *testing.M) {
	if d := os.Getenv(helperEnv); d != "" {
		if raw, ok := strings.CutPrefix(d, "raw:"); ok {
			os.Exit(helperRawServer(raw, os.Stdin, os.Stdout))
		}
		os.Exit(helperServer(d, os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// helperServer serves until stdin closes. Its handler sleeps for delay and reports the time
// it spent from its start to just before it writes the response in inference_time_s, as
// sglang does; a client's overhead is its latency minus that figure.
func helperServer(delay string, stdin io.Reader, stdout io.Writer) int {
	d, err := time.ParseDuration(delay)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		io.Copy(io.Discard, r.Body)
		if d > 0 {
			time.Sleep(d)
		}
		b := make([]byte, 0, 96)
		b = append(b, `{"id":"x","data":[{"b64_json":"AA=="}],"inference_time_s":`...)
		b = strconv.AppendFloat(b, time.Since(t0).Seconds(), 'f', 9, 64)
		b = append(b, '}')
		w.Header()["Content-Type"] = []string{"application/json"}
		w.Write(b)
	})
	go http.Serve(ln, h)
	fmt.Fprintln(stdout, "http://"+ln.Addr().String())
	io.Copy(io.Discard, stdin)
	ln.Close()
	return 0
}

// helperRawServer is helperServer without net/http's server: one goroutine per connection
// reads a request (http.ReadRequest), sleeps and writes a fixed-length response. It takes
// the server's own framing (net/http's per-request goroutines and allocations) out of the
// measured overhead, leaving the client's share and the loopback.
func helperRawServer(delay string, stdin io.Reader, stdout io.Writer) int {
	d, err := time.ParseDuration(delay)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				bw := bufio.NewWriter(c)
				var b []byte
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					t0 := time.Now()
					io.Copy(io.Discard, r.Body)
					if d > 0 {
						time.Sleep(d)
					}
					b = append(b[:0], `{"id":"x","data":[{"b64_json":"AA=="}],"inference_time_s":`...)
					b = strconv.AppendFloat(b, time.Since(t0).Seconds(), 'f', 9, 64)
					b = append(b, '}')
					bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ")
					bw.WriteString(strconv.Itoa(len(b)))
					bw.WriteString("\r\n\r\n")
					bw.Write(b)
					if bw.Flush() != nil {
						return
					}
				}
			}()
		}
	}()
	fmt.Fprintln(stdout, "http://"+ln.Addr().String())
	io.Copy(io.Discard, stdin)
	ln.Close()
	return 0
}

// startHelper runs the test binary as a helper server with the given handler delay and
// returns its base URL; the server exits when the test ends (its stdin is closed) and is
// waited for, so nothing is left behind.
func startHelper(tb testing.TB, delay time.Duration) string {
	return startHelperMode(tb, delay.String())
}

// startRawHelper is startHelper with helperRawServer.
func startRawHelper(tb testing.TB, delay time.Duration) string {
	return startHelperMode(tb, "raw:"+delay.String())
}

func startHelperMode(tb testing.TB, mode string) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			tb.Error("helper server did not exit when its stdin closed")
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		tb.Fatalf("helper server: %v", err)
	}
	return strings.TrimSpace(line)
}

// runSummarized is Run with the summary of its records.
func runSummarized(ctx context.Context, cfg Config) (rundir.LoadSummary, []Record, error) {
	recs, wall, err := Run(ctx, cfg)
	return Summarize(recs, wall), recs, err
}

// testLoader is the loader of cfg, for a test that sends requests through it one by one.
func testLoader(tb testing.TB, cfg Config) *loader {
	tb.Helper()
	cfg.Build = func(int, bool) (Request, error) { return Request{}, nil }
	l, err := newLoader(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(l.close)
	return l
}
