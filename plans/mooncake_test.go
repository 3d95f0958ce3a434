package plans

import (
	"strings"
	"testing"
)

func TestMooncakeRecords(t *testing.T) {
	var got []MooncakeRecord
	err := MooncakeRecords(strings.NewReader("{\"timestamp\": 3, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [7, 8]}\n\n  \n{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1}\n"), "t.jsonl",
		func(line int, r MooncakeRecord) error { got = append(got, r); return nil })
	if err != nil || len(got) != 2 || got[0].InputLength != 600 || len(got[0].HashIDs) != 2 || got[1].HashIDs != nil {
		t.Fatalf("%+v, %v", got, err)
	}
	for _, c := range []struct{ in, want string }{
		{`{"timestamp": -1, "input_length": 4, "output_length": 1}`, "t.jsonl:1: timestamp -1"},
		{`{"timestamp": 0, "input_length": 0, "output_length": 1}`, "input_length 0"},
		{`{"timestamp": 0, "input_length": 4, "output_length": 9999999}`, "output_length 9999999"},
		{`[1, 2]`, "t.jsonl:1"},
		{"{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1}\n" + strings.Repeat("x", maxMooncakeLine+1), "over 1024 KiB"},
	} {
		err := MooncakeRecords(strings.NewReader(c.in), "t.jsonl", func(int, MooncakeRecord) error { return nil })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40q: %v, want %q", c.in, err, c.want)
		}
	}
	n := 0
	if err := MooncakeRecords(strings.NewReader(strings.Repeat("{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1}\n", 5)), "t", func(int, MooncakeRecord) error {
		if n++; n == 2 {
			return ErrStopRecords
		}
		return nil
	}); err != nil || n != 2 {
		t.Errorf("stop: %d records, %v", n, err)
	}
}

// FuzzMooncakeRecords: any input streams records within the bounds or fails naming the file.
func FuzzMooncakeRecords(f *testing.F) {
	for _, s := range []string{
		`{"timestamp": 0, "input_length": 1100, "output_length": 12, "hash_ids": [0, 1, 2]}`,
		"{\"timestamp\": 1}\n{}", `{"hash_ids": [1e40]}`, "", "\n\n", `{"timestamp": 9223372036854775807, "input_length": 1, "output_length": 1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := MooncakeRecords(strings.NewReader(string(data)), "f.jsonl", func(_ int, r MooncakeRecord) error {
			if r.Timestamp < 0 || r.InputLength < 1 || r.InputLength > MaxMooncakeTokens || r.OutputLength < 1 ||
				len(r.HashIDs) > (r.InputLength+MooncakeBlock-1)/MooncakeBlock {
				t.Fatalf("a record out of bounds reached fn: %+v", r)
			}
			return nil
		})
		if err != nil && !strings.HasPrefix(err.Error(), "f.jsonl") {
			t.Fatalf("error %q does not name the file", err)
		}
	})
}
