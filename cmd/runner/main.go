// Command runner turns a TOML plan into reproducible sglang runs under the torch profiler or
// Nsight Systems, refuses runs that did not measure what they claim, and triages the traces.
// See README.md for usage. All logic lives in the library packages; this package only parses
// flags, wires the process's args, environment and terminal into them, and maps results to
// exit codes.
package main

import "os"

func main() { os.Exit(run(os.Args, stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr})) }
