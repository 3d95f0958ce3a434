package supervisor

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	const rest = " 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 "
	cases := []struct {
		in   string
		want Stat
		ok   bool
	}{
		{"123 (sleep) S 1 120 120" + rest + "845141 1000 200", Stat{'S', 1, 120, 845141, 4194560}, true},
		{"7 (a) (b) c) Z 5 99 99" + rest + "42 0 0", Stat{'Z', 5, 99, 42, 4194560}, true},
		{"7 (no close paren S 1 2", Stat{}, false},
		{"7 (x) S 1 120 120 0", Stat{}, false},
		{"7 (x) S one 120 120" + rest + "1 0 0", Stat{}, false},
		{"", Stat{}, false},
	}
	for _, tc := range cases {
		got, ok := ParseStat([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseStat(%q) = %+v %v, want %+v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParseStat: any /proc/<pid>/stat text parses or is refused, without a
// panic, and a parsed state is the first field after the last ')'.
func FuzzParseStat(f *testing.F) {
	f.Add("123 (sleep) S 1 120 120 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 845141 1000 200")
	f.Add("7 (a) (b) c) Z 5 99 99")
	f.Fuzz(func(t *testing.T, in string) {
		st, ok := ParseStat([]byte(in))
		if ok && st.State != strings.Fields(in[strings.LastIndexByte(in, ')')+1:])[0][0] {
			t.Fatalf("state %q not the first field after the last ')' in %q", st.State, in)
		}
	})
}

func TestKillPending(t *testing.T) {
	status := func(sig, shd string) []byte {
		return []byte("Name:\tsleep\nState:\tS (sleeping)\nSigQ:\t0/63\nSigPnd:\t" + sig + "\nShdPnd:\t" + shd + "\nSigBlk:\t0000000000000100\n")
	}
	cases := []struct {
		in   []byte
		want bool
	}{
		{status("0000000000000000", "0000000000000000"), false},
		{status("0000000000000100", "0000000000000000"), true},
		{status("0000000000000000", "0000000000000100"), true},
		{status("0000000000004002", "0000000000000000"), false}, // SIGINT and SIGTERM
		{status("zz", "0000000000000000"), false},
		{[]byte("Name:\tx\n"), false},
		{nil, false},
	}
	for _, tc := range cases {
		if got := killPending(tc.in); got != tc.want {
			t.Errorf("killPending(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// Dying: a live process that nobody killed is not, a zombie is.
func TestDying(t *testing.T) {
	if Dying(os.Getpid()) {
		t.Error("Dying(self) = true")
	}
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Skip(err)
	}
	// Unreaped: a zombie once it exits.
	for i := 0; i < 500; i++ {
		if st, ok := ReadStat(p.Pid); ok && st.State == 'Z' {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !Dying(p.Pid) {
		t.Error("Dying(zombie) = false")
	}
	p.Wait()
}
