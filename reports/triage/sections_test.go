package triage

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sglprof/runner/reports/render/table"
)

// fakeSection is a reader's section as the nsys one is: a typed slice with its own table.
type fakeSection []string

func (s fakeSection) Table() *table.Table {
	t := &table.Table{Title: "Fake ranges", Header: []string{"Range"}, Empty: "(none)"}
	for _, r := range s {
		t.Rows = append(t.Rows, []string{r})
	}
	return t
}

func (s fakeSection) CSVRows() []CSVRow {
	share := 12.5
	var out []CSVRow
	for _, r := range s {
		out = append(out, CSVRow{Table: "fake", Name: r, Category: "dom", TotalUS: 1.5, Count: 2, SharePct: &share, Evidence: "k=v"})
	}
	return out
}

// TestSections: a section renders after the triage in text and Markdown (a "|" or newline in a
// range name stays in its cell), joins the long-form CSV under the triage's column names, and
// is encoded under its key in JSON; a report without sections renders as before.
func TestSections(t *testing.T) {
	r := analyzeGolden(t)
	var plain bytes.Buffer
	if err := Render(&plain, r, FormatMarkdown, DefaultCutoff); err != nil {
		t.Fatal(err)
	}
	r.NVTX = fakeSection{"a|b\nc"}
	var b bytes.Buffer
	if err := Render(&b, r, FormatMarkdown, DefaultCutoff); err != nil {
		t.Fatal(err)
	}
	want := plain.String() + "\n### Fake ranges\n\n| Range |\n| --- |\n| a\\|b<br>c |\n"
	if b.String() != want {
		t.Errorf("markdown tail:\n%q\nwant tail:\n%q", b.String()[plain.Len():], want[plain.Len():])
	}
	b.Reset()
	if err := Render(&b, r, FormatText, DefaultCutoff); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "\nFake ranges\nRange\n-----\na|b\nc\n") {
		t.Errorf("text tail: %q", b.String()[max(0, b.Len()-60):])
	}

	b.Reset()
	if err := Render(&b, r, FormatCSV, DefaultCutoff); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	last := recs[len(recs)-1]
	got := map[string]string{}
	for i, h := range recs[0] {
		if last[i] != "" {
			got[h] = last[i]
		}
	}
	wantCSV := map[string]string{"table": "fake", "name": "a|b\nc", "category": "dom", "total_us": "1.5", "count": "2", "share_pct": "12.5", "evidence": "k=v"}
	if len(got) != len(wantCSV) {
		t.Errorf("csv row %v, want %v", got, wantCSV)
	}
	for k, v := range wantCSV {
		if got[k] != v {
			t.Errorf("csv %s = %q, want %q", k, got[k], v)
		}
	}

	b.Reset()
	if err := Render(&b, r, FormatJSON, DefaultCutoff); err != nil {
		t.Fatal(err)
	}
	var js struct {
		NVTX []string `json:"nvtx"`
		API  *[]any   `json:"api"`
	}
	if err := json.Unmarshal(b.Bytes(), &js); err != nil || len(js.NVTX) != 1 || js.NVTX[0] != "a|b\nc" || js.API != nil {
		t.Errorf("json sections: %+v, %v", js, err)
	}
}
