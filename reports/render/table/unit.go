package table

import "strconv"

// TimeUnit is one table's time unit: ms when its largest value reaches a millisecond, else µs.
// Every time column of a table uses the one unit, written in the header, so a column never mixes
// "812 µs" with "1.2 ms"; triage's kernel, overlap, fusion and ranks tables and the nsys
// tables all choose it here.
type TimeUnit struct {
	// Label is "ms" or "µs", for the header: "GPU time (ms)".
	Label string
	div   float64
	prec  int
}

// TimeUnitFor chooses the unit of n values given in microseconds by usAt.
func TimeUnitFor(n int, usAt func(i int) float64) TimeUnit {
	var mx float64
	for i := 0; i < n; i++ {
		mx = max(mx, usAt(i))
	}
	if mx >= 1000 {
		return TimeUnit{"ms", 1000, 2}
	}
	return TimeUnit{"µs", 1, 1}
}

// Format writes a value in microseconds in the unit, without the unit (the header has it).
func (u TimeUnit) Format(us float64) string {
	div, prec := u.div, u.prec
	if div == 0 {
		div, prec = 1, 1 // the zero TimeUnit is µs
	}
	return strconv.FormatFloat(us/div, 'f', prec, 64)
}

// WithPrec is u writing prec decimals: the nsys tables keep microsecond resolution in ms (3),
// where triage's shares of a stage need 2.
func (u TimeUnit) WithPrec(prec int) TimeUnit {
	if u.div == 0 {
		u.div, u.Label = 1, "µs"
	}
	u.prec = prec
	return u
}

// Header is name followed by the unit in parentheses: "Total (ms)".
func (u TimeUnit) Header(name string) string {
	l := u.Label
	if l == "" {
		l = "µs"
	}
	return name + " (" + l + ")"
}
