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
	i := 0
	neg := false
	if i < len(b) && (b[i] == '-' || b[i] == '+') {
		neg = b[i] == '-'
		i++
	}
	var mant uint64 // significant digits, at most 19 kept (19 nines fit in uint64)
	digits := 0     // digits kept in mant
	dropExp := 0    // integer digits dropped because mant was full (each multiplies by 10)
	fracDigits := 0 // fraction digits kept in mant
	roundDigit := -1
	sticky := false
	seen := false
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		seen = true
		d := uint64(b[i] - '0')
		if digits < 19 {
			if mant != 0 || d != 0 {
				digits++
			}
			mant = mant*10 + d
		} else {
			if roundDigit < 0 {
				roundDigit = int(d)
			} else if d != 0 {
				sticky = true
			}
			dropExp++
		}
	}
	if i < len(b) && b[i] == '.' {
		i++
		fracSeen := false
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			fracSeen = true
			d := uint64(b[i] - '0')
			if digits < 19 && dropExp == 0 {
				if mant != 0 || d != 0 {
					digits++
				}
				mant = mant*10 + d
				fracDigits++
			} else {
				if roundDigit < 0 {
					roundDigit = int(d)
				} else if d != 0 {
					sticky = true
				}
			}
		}
		if !fracSeen && !seen {
			return 0, false
		}
		seen = seen || fracSeen
	}
	if !seen {
		return 0, false
	}
	exp := 0
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '-' || b[i] == '+') {
			eneg = b[i] == '-'
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return 0, false
		}
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if exp < 10000 {
				exp = exp*10 + int(b[i]-'0')
			}
		}
		if eneg {
			exp = -exp
		}
	}
	if i != len(b) {
		return 0, false
	}
	// value = mant * 10^(dropExp - fracDigits + exp + scale), plus the dropped digits.
	p := dropExp - fracDigits + exp + scale
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
		if roundDigit >= 5 {
			mant++
		}
	} else {
		for ; p < 0; p++ {
			if mant == 0 {
				roundDigit, sticky = 0, false
				break
			}
			d := int(mant % 10)
			if roundDigit > 0 || sticky {
				sticky = true
			}
			roundDigit = d
			mant /= 10
		}
		if roundDigit >= 5 {
			mant++
		}
	}
	if mant > 1<<63-1 {
		return 0, false
	}
	v := int64(mant)
	if neg {
		v = -v
	}
	return v, true
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
