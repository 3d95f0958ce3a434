package load

import (
	"bufio"
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
)

// helperEnv switches the test binary into a trivial HTTP server (see TestMain): the
// benchmarks drive a handler in another process, as the "local HTTP handler" is,
// so that the server's goroutines and garbage collector do not share the client's.
const helperEnv = "RUNNER_LOAD_TEST_SERVER"

func TestMain(m *testing.M) {
	if d := os.Getenv(helperEnv); d != "" {
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

// startHelper runs the test binary as a helper server with the given handler delay and
// returns its base URL; the server exits when the test ends (its stdin is closed) and is
// waited for, so nothing is left behind.
func startHelper(tb testing.TB, delay time.Duration) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+delay.String())
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
