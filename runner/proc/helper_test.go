package proc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// helperEnv selects a helper mode: the test binary re-executes itself as the
// child program, so the tests need nothing but Go (and /bin/sh for the
// process-tree tests).
const helperEnv = "PROC_TEST_HELPER"

func TestMain(m *testing.M) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		os.Exit(m.Run())
	}
	os.Exit(helperMain(mode))
}

// helperArgv is the argv that runs this test binary in helper mode; pass
// helperEnvFor(mode) as Spec.Env.
func helperArgv(t testing.TB, args ...string) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	return append([]string{exe}, args...)
}

func helperEnvFor(mode string, extra ...string) []string {
	// Under -race a program sleeps 1 s at exit by default, which would look
	// like a child ignoring SIGINT.
	env := append(os.Environ(), helperEnv+"="+mode, "GORACE=atexit_sleep_ms=0")
	return append(env, extra...)
}

func helperMain(mode string) int {
	switch mode {
	case "log":
		// A fast sglang-style logger: ~100-byte lines through bufio, as a
		// Python process with a block-buffered stdout would write them.
		n, _ := strconv.ParseInt(os.Getenv("PROC_TEST_BYTES"), 10, 64)
		bufSize, _ := strconv.Atoi(os.Getenv("PROC_TEST_BUF"))
		if bufSize <= 0 {
			bufSize = 4096
		}
		writeLogLines(os.Stdout, n, bufSize)
		return 0
	case "longline":
		// Several MB without a newline (a JSON dump), then a normal line.
		w := bufio.NewWriter(os.Stdout)
		n, _ := strconv.Atoi(os.Getenv("PROC_TEST_BYTES"))
		for i := 0; i < n; i++ {
			w.WriteByte('a' + byte(i%26))
		}
		w.WriteString("\nend\n")
		w.Flush()
		return 0
	case "crflood":
		// A tqdm progress bar: '\r' + bar, many times, no '\n' until the end.
		n, _ := strconv.Atoi(os.Getenv("PROC_TEST_UPDATES"))
		w := bufio.NewWriter(os.Stderr)
		for i := 1; i <= n; i++ {
			w.WriteString("\r 50%|#####     | ")
			w.WriteString(strconv.Itoa(i))
			w.WriteString("/")
			w.WriteString(strconv.Itoa(n))
			w.WriteString(" [00:01<00:01, 9.99it/s]")
		}
		w.WriteString("\n")
		w.Flush()
		return 0
	case "args":
		// Echo argv[1:] and the working directory as JSON.
		wd, _ := os.Getwd()
		json.NewEncoder(os.Stdout).Encode(map[string]any{"args": os.Args[1:], "dir": wd, "env": os.Getenv("PROC_TEST_VALUE")})
		return 0
	case "graceful":
		// Handles SIGINT like nsys: finishes its report, then exits 0.
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT)
		os.Stdout.WriteString("ready\n")
		<-ch
		time.Sleep(20 * time.Millisecond)
		os.Stdout.WriteString("report written\n")
		return 0
	case "log-signals":
		// Reports each SIGINT and SIGTERM and carries on: only SIGKILL ends
		// it, so every rung of the ladder shows up in its output.
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		os.Stdout.WriteString("ready\n")
		for sig := range ch {
			os.Stdout.WriteString("got " + sig.String() + "\n")
		}
		return 0
	case "supervised-runner":
		// A runner in miniature: runs the "escape" helper under Run with
		// a process record, until it is killed.
		res := Run(context.Background(), Spec{
			Argv: []string{os.Args[0]}, Env: helperEnvFor("escape", "PROC_TEST_DIR="+os.Getenv("PROC_TEST_DIR")),
			Record: filepath.Join(os.Getenv("PROC_TEST_DIR"), RecordFile),
		}, nil)
		fmt.Println("run returned", res.ExitCode)
		return 0
	case "escape":
		// A backend that starts a grandchild in a session of its own
		// (setsid), out of reach of group signals, which holds a port.
		c := exec.Command(os.Args[0])
		c.Env = helperEnvFor("listen", "PROC_TEST_DIR="+os.Getenv("PROC_TEST_DIR"))
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		time.Sleep(time.Hour)
		return 0
	case "listen":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 1
		}
		dir := os.Getenv("PROC_TEST_DIR")
		info := fmt.Sprintf("%d %d %d\n", l.Addr().(*net.TCPAddr).Port, os.Getpid(), os.Getppid())
		os.WriteFile(filepath.Join(dir, "listen.tmp"), []byte(info), 0o644)
		os.Rename(filepath.Join(dir, "listen.tmp"), filepath.Join(dir, "listen"))
		for {
			if c, err := l.Accept(); err == nil {
				c.Close()
			}
		}
	case "sleep":
		// Default signal handling: SIGINT ends it.
		time.Sleep(time.Minute)
		return 0
	case "ignore-int":
		// Ignores SIGINT, dies on SIGTERM.
		signal.Ignore(syscall.SIGINT)
		os.Stdout.WriteString("ready\n")
		time.Sleep(time.Minute)
		return 0
	}
	os.Stderr.WriteString("unknown helper mode " + mode + "\n")
	return 2
}

// writeLogLines writes n bytes of realistic log lines (the last one cut
// short to make the total exact) through a bufio.Writer of bufSize.
func writeLogLines(f *os.File, n int64, bufSize int) {
	w := bufio.NewWriterSize(f, bufSize)
	line := make([]byte, 0, 256)
	var written int64
	for i := 0; written < n; i++ {
		line = line[:0]
		line = append(line, "[2026-11-21 18:"...)
		line = appendPad(line, (i/60000)%60)
		line = append(line, ':')
		line = appendPad(line, (i/1000)%60)
		line = append(line, '.')
		line = strconv.AppendInt(line, int64(100+i%900), 10)
		line = append(line, "] [INFO] Denoising step "...)
		line = strconv.AppendInt(line, int64(i%50), 10)
		line = append(line, "/50 took "...)
		line = strconv.AppendInt(line, int64(80+i%40), 10)
		line = append(line, '.')
		line = appendPad(line, i%100)
		line = append(line, " ms, peak mem "...)
		line = strconv.AppendInt(line, int64(30+i%9), 10)
		line = append(line, ".2 GB (rank 0)\n"...)
		if rest := n - written; int64(len(line)) > rest {
			line = line[:rest]
		}
		w.Write(line)
		written += int64(len(line))
	}
	w.Flush()
}

func appendPad(b []byte, v int) []byte {
	if v < 10 {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, int64(v), 10)
}
