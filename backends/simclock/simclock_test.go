package simclock

import "testing"

func TestTimeScale(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want float64
	}{
		{nil, DefaultTimeScale},
		{[]string{"A=1", EnvTimeScale + "=0.5"}, 0.5},
		{[]string{EnvTimeScale + "=0.5", EnvTimeScale + "=0"}, 0}, // the last one wins, as for exec
		{[]string{EnvTimeScale + "= "}, DefaultTimeScale},
		{[]string{EnvTimeScale + "=fast"}, DefaultTimeScale},
		{[]string{EnvTimeScale + "=-1"}, DefaultTimeScale},
		{[]string{EnvTimeScale + "=NaN"}, DefaultTimeScale},
		{[]string{EnvTimeScale + "X=3"}, DefaultTimeScale},
	} {
		if got := TimeScale(c.env); got != c.want {
			t.Errorf("TimeScale(%q) = %g, want %g", c.env, got, c.want)
		}
	}
	for _, bad := range []string{"fast", "-0.1", "Inf", "1e999"} {
		if _, err := ParseTimeScale(bad); err == nil {
			t.Errorf("ParseTimeScale(%q) accepted", bad)
		}
	}
}

func FuzzParseTimeScale(f *testing.F) {
	for _, s := range []string{"", "0", "0.002", " 1 ", "x", "-1", "NaN", "Inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseTimeScale(s)
		if err == nil && !(v >= 0) {
			t.Fatalf("ParseTimeScale(%q) = %g", s, v)
		}
	})
}
