package kineto

// parseMicrosNS converts a JSON number holding microseconds (Kineto's "ts"/"dur") into int64
// nanoseconds without going through float64: "4909914216204.635" is 4909914216204635 ns exactly,
// and the integer absolute-epoch microseconds of old traces ("1683564901548726") stay exact too,
// which a float64 product would not guarantee. Digits beyond the nanosecond are rounded half away
// from zero; exponents ("1.5e3") are honoured. ok is false for text that is not a number or whose
// value does not fit in int64 nanoseconds.
func parseMicrosNS(b []byte) (ns int64, ok bool) {
	return parseDecimalScaled(b, 3)
}

// parseDecimalScaled returns the decimal number in b multiplied by 10^scale, rounded to an
// integer, using integer arithmetic only.
func parseDecimalScaled(b []byte, scale int) (int64, bool) {
	d, neg, ok := scanDecimal(b)
	if !ok {
		return 0, false
	}
	mant, ok := d.scaled(scale)
	if !ok || mant > 1<<63-1 {
		return 0, false
	}
	v := int64(mant)
	if neg {
		v = -v
	}
	return v, true
}

// decimal is a JSON number as read by scanDecimal, without its sign: its value is
// mant * 10^exp plus the digits that did not fit into mant, summarised by the first of them
// (roundDigit, -1 when none) and whether any later one was not zero (sticky). Four fields, so
// that the compiler can keep it in registers.
type decimal struct {
	mant       uint64 // significant digits, at most 19 kept (19 nines fit in uint64)
	exp        int
	roundDigit int
	sticky     bool
}

// scanDecimal reads [sign] digits [. digits] [e [sign] digits]; ok is false for anything else
// (no digit at all, an "e" without digits, trailing bytes). Once 19 significant digits are
// kept, later digits only feed the rounding; a dropped integer digit still counts as a power of
// ten, and a fraction digit after a dropped integer digit is dropped as well. The state lives
// in locals, not in a struct, so that it stays in registers: this runs twice per trace event.
func scanDecimal(b []byte) (d decimal, neg, ok bool) {
	var mant uint64
	digits, dropExp, fracDigits, roundDigit, sticky := 0, 0, 0, -1, false
	i := 0
	if i < len(b) && (b[i] == '-' || b[i] == '+') {
		neg = b[i] == '-'
		i++
	}
	start := i
	for ; i < len(b) && isDigit(b[i]); i++ {
		x := uint64(b[i] - '0')
		if digits < 19 {
			if mant != 0 || x != 0 {
				digits++
			}
			mant = mant*10 + x
		} else {
			roundDigit, sticky = dropped(roundDigit, sticky, x)
			dropExp++
		}
	}
	seen := i > start
	if i < len(b) && b[i] == '.' {
		i++
		start = i
		for ; i < len(b) && isDigit(b[i]); i++ {
			x := uint64(b[i] - '0')
			if digits < 19 && dropExp == 0 {
				if mant != 0 || x != 0 {
					digits++
				}
				mant = mant*10 + x
				fracDigits++
			} else {
				roundDigit, sticky = dropped(roundDigit, sticky, x)
			}
		}
		seen = seen || i > start
	}
	if !seen {
		return d, neg, false
	}
	exp := 0
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		if exp, i, ok = scanExponent(b, i+1); !ok {
			return d, neg, false
		}
	}
	return decimal{mant: mant, exp: dropExp - fracDigits + exp, roundDigit: roundDigit, sticky: sticky}, neg, i == len(b)
}

// scanExponent reads the [sign] digits after an "e" starting at b[i]; it returns the exponent
// (capped at ±10000, far beyond any int64 result) and the index after it.
func scanExponent(b []byte, i int) (exp, next int, ok bool) {
	neg := false
	if i < len(b) && (b[i] == '-' || b[i] == '+') {
		neg = b[i] == '-'
		i++
	}
	if i >= len(b) || !isDigit(b[i]) {
		return 0, i, false
	}
	for ; i < len(b) && isDigit(b[i]); i++ {
		if exp < 10000 {
			exp = exp*10 + int(b[i]-'0')
		}
	}
	if neg {
		exp = -exp
	}
	return exp, i, true
}

// scaled returns |d| * 10^scale rounded half away from zero; ok is false when the product does
// not fit in int64 (rounding up can still pass the limit by one, which the caller checks).
func (d decimal) scaled(scale int) (uint64, bool) {
	p := d.exp + scale
	mant, roundDigit, sticky := d.mant, d.roundDigit, d.sticky
	if mant == 0 {
		return 0, true
	}
	if p >= 0 {
		if roundDigit >= 0 && p > 0 {
			// Digits were dropped yet the result needs them: the value is too large anyway.
			return 0, false
		}
		for ; p > 0; p-- {
			if mant > (1<<63-1)/10 {
				return 0, false
			}
			mant *= 10
		}
	} else {
		for ; p < 0; p++ {
			if mant == 0 {
				roundDigit, sticky = 0, false
				break
			}
			if roundDigit > 0 || sticky {
				sticky = true
			}
			roundDigit = int(mant % 10)
			mant /= 10
		}
	}
	if roundDigit >= 5 {
		mant++
	}
	return mant, true
}

// parseInt parses a JSON integer (no fraction, no exponent) as int64.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	i := 0
	neg := false
	if b[0] == '-' {
		neg = true
		i++
		if len(b) == 1 {
			return 0, false
		}
	}
	var v uint64
	for ; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			// Accept "12.0" style integers written by re-serialising tools.
			if c == '.' || c == 'e' || c == 'E' {
				x, ok := parseDecimalScaled(b, 0)
				return x, ok
			}
			return 0, false
		}
		if v > (1<<63)/10 {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if !neg && v > 1<<63-1 || neg && v > 1<<63 {
		return 0, false
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

// dropped folds a digit that did not fit into the rounding state: the first dropped digit, and
// whether any later one was not zero.
func dropped(roundDigit int, sticky bool, x uint64) (int, bool) {
	if roundDigit < 0 {
		return int(x), sticky
	}
	return roundDigit, sticky || x != 0
}
