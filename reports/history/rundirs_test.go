package history

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// RunDirs lists the runs of one configuration on one GPU model, newest first, without the
// current run, at most limit of them.
func TestRunDirs(t *testing.T) {
	ctx := context.Background()
	db := open(t, filepath.Join(t.TempDir(), "h.db"))
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := range 4 {
		r := run(fmt.Sprint("r", i), t0.Add(time.Duration(i)*time.Hour), 1e9)
		switch i {
		case 1:
			r.GPU = "A100" // another GPU model
		case 2:
			r.Configs[0].Key = "other" // another configuration
		}
		if _, err := db.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.RunDirs(ctx, "cfg", "H100", "r3", 5)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/runs/p/r0"}; !slices.Equal(got, want) {
		t.Errorf("RunDirs without r3 = %q, want %q", got, want)
	}
	if got, _ = db.RunDirs(ctx, "cfg", "H100", "", 1); !slices.Equal(got, []string{"/runs/p/r3"}) {
		t.Errorf("RunDirs limit 1 = %q, want the newest, r3", got)
	}
}
