package main

import (
	"net"
	"strconv"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// Script commands of the serve-mode scripts (cmd/runner/testdata/script/serve*.txtar).

// portfree PORT: 127.0.0.1:PORT can be bound (retried for up to 5s: a server that was just
// stopped may take a moment to close its socket). `! portfree PORT` waits up to 10s until
// something listens on PORT, which makes it the way to wait for a background server.
func cmdPortFree(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: portfree PORT")
	}
	port, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("portfree: %v", err)
	}
	tries := 50
	if neg {
		tries = 100
	}
	for range tries {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			ln.Close()
		}
		if (err == nil) != neg {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	if neg {
		ts.Fatalf("portfree: nothing listens on 127.0.0.1:%d", port)
	}
	ts.Fatalf("portfree: 127.0.0.1:%d is still in use", port)
}

// freeport NAME: sets the environment variable NAME to a port that is free now.
func cmdFreePort(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 || neg {
		ts.Fatalf("usage: freeport NAME")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ts.Fatalf("freeport: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ts.Setenv(args[0], strconv.Itoa(port))
}
