// Command skipped reads `go test -json` events on stdin, prints the package lines as `go test ./...`
// does, and then every test that skipped with the message it skipped with. scripts/test.sh
// runs it; `go run ./cmd/skipped < events.json` reads a saved run.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action, Package, Test, Output string
	Elapsed                       float64
}

func main() {
	out := map[string][]string{} // package/test → its output lines
	var skipped []string
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			fmt.Println(sc.Text()) // a build error line, not an event
			continue
		}
		id := e.Package + " " + e.Test
		switch {
		case e.Action == "output" && e.Test != "":
			out[id] = append(out[id], strings.TrimSpace(e.Output))
		case e.Action == "output" && e.Test == "" && !strings.HasPrefix(e.Output, "=== ") && !strings.HasPrefix(e.Output, "PASS") &&
			(strings.HasPrefix(e.Output, "ok") || strings.HasPrefix(e.Output, "FAIL") || strings.HasPrefix(e.Output, "?")):
			fmt.Print(e.Output)
		case e.Action == "skip" && e.Test != "":
			skipped = append(skipped, id)
		}
	}
	if len(skipped) == 0 {
		return
	}
	sort.Strings(skipped)
	fmt.Println("\nskipped (install what each names to run it):")
	for _, id := range skipped {
		why := ""
		for _, l := range out[id] {
			if l != "" && !strings.HasPrefix(l, "=== ") && !strings.HasPrefix(l, "--- SKIP") {
				why = l // the last line the test wrote: its skip message
			}
		}
		pkg, test, _ := strings.Cut(id, " ")
		fmt.Printf("  %s %s: %s\n", strings.TrimPrefix(pkg, "github.com/sglprof/runner/"), test, why)
	}
}
