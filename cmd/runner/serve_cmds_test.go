package main

import (
	"encoding/json"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// Script commands of the serve-mode scripts (cmd/runner/testdata/script/serve*.txtar).

// portfree PORT|FILE: 127.0.0.1:PORT (or the port of a JSON FILE such as server.json) can be bound (retried for up to 5s: a server that was just
// stopped may take a moment to close its socket). `! portfree PORT` waits up to 10s until
// something listens on PORT, which makes it the way to wait for a background server.
func cmdPortFree(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: portfree PORT")
	}
	port, err := strconv.Atoi(args[0])
	if err != nil {
		// A file: the "port" field of a JSON document (a run's servers/<n>/server.json).
		var doc struct {
			Port int `json:"port"`
		}
		b, rerr := os.ReadFile(ts.MkAbs(args[0]))
		if rerr != nil || json.Unmarshal(b, &doc) != nil || doc.Port == 0 {
			ts.Fatalf("portfree: %q is neither a port nor a JSON file with a port field", args[0])
		}
		port = doc.Port
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
