package stats

import (
	"math"

	mstats "github.com/aclements/go-moremath/stats"
)

// TTest is the outcome of a two-sample t-test of b against a.
type TTest struct {
	// Diff is mean(b) − mean(a); SE its standard error; T = Diff/SE.
	Diff, SE, T float64
	// DF are the degrees of freedom of the t distribution the test used.
	DF float64
	// P is the two-sided p-value: 1 when the means are equal, 0 when they differ and neither
	// side has any spread (every value of a side is the same), where the difference is exact.
	P float64
}

// Welch is Welch's two-sample t-test (no assumption that the two variances are equal), the
// test that decides with as few as two values a side when the values are tight: a rank test
// such as Mann-Whitney U cannot reach p < 0.05 with three values a side however far apart
// they are. ok is false when a side has fewer than two values (no variance to estimate).
func Welch(a, b []float64) (TTest, bool) {
	if len(a) < 2 || len(b) < 2 {
		return TTest{}, false
	}
	na, nb := float64(len(a)), float64(len(b))
	va, vb := variance(a), variance(b)
	t := TTest{Diff: Mean(b) - Mean(a)}
	sa, sb := va/na, vb/nb
	t.SE = math.Sqrt(sa + sb)
	if sa+sb > 0 {
		// Welch–Satterthwaite.
		t.DF = (sa + sb) * (sa + sb) / (sa*sa/(na-1) + sb*sb/(nb-1))
	} else {
		t.DF = na + nb - 2
	}
	t.finish()
	return t, true
}

// Pooled is Student's two-sample t-test with one pooled variance, which needs only one value
// on a side when the other has two or more (the variance comes from the values there). Change
// detection uses it, as Hunter (Apache Otava) does, because a segment just after a step change
// has one or two runs. ok is false with fewer than three values in all or an empty side.
func Pooled(a, b []float64) (TTest, bool) {
	if len(a) == 0 || len(b) == 0 || len(a)+len(b) < 3 {
		return TTest{}, false
	}
	na, nb := float64(len(a)), float64(len(b))
	ss := 0.0
	if len(a) > 1 {
		ss += variance(a) * (na - 1)
	}
	if len(b) > 1 {
		ss += variance(b) * (nb - 1)
	}
	t := TTest{Diff: Mean(b) - Mean(a), DF: na + nb - 2}
	t.SE = math.Sqrt(ss / t.DF * (1/na + 1/nb))
	t.finish()
	return t, true
}

// finish computes T and P from Diff, SE and DF.
func (t *TTest) finish() {
	switch {
	case t.Diff == 0:
		t.T, t.P = 0, 1
	case t.SE == 0:
		t.T, t.P = math.Copysign(math.Inf(1), t.Diff), 0
	default:
		t.T = t.Diff / t.SE
		t.P = 2 * (1 - mstats.TDist{V: t.DF}.CDF(math.Abs(t.T)))
		t.P = min(max(t.P, 0), 1)
	}
}

// variance is the sample variance (n−1 in the denominator).
func variance(xs []float64) float64 {
	sd := StdDev(xs, 1)
	return sd * sd
}

// TQuantile is the p-quantile of Student's t distribution with df degrees of freedom (the
// normal's for infinite df), found by bisection on the CDF; NaN for p outside (0, 1) or
// df ≤ 0.
func TQuantile(p, df float64) float64 {
	if !(p > 0 && p < 1) || !(df > 0) {
		return math.NaN()
	}
	if math.IsInf(df, 1) || df > 1e7 {
		return mstats.StdNormal.InvCDF(p)
	}
	if p < 0.5 {
		return -TQuantile(1-p, df)
	}
	d := mstats.TDist{V: df}
	lo, hi := 0.0, 1.0
	for d.CDF(hi) < p {
		lo, hi = hi, hi*2
		if hi > 1e12 {
			return math.Inf(1)
		}
	}
	for i := 0; i < 200 && hi-lo > 1e-12*hi; i++ {
		mid := (lo + hi) / 2
		if d.CDF(mid) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// NormalQuantile is the p-quantile of the standard normal distribution.
func NormalQuantile(p float64) float64 { return mstats.StdNormal.InvCDF(p) }

// DetectableShift is the smallest true difference of means that a two-sided t-test at level
// alpha detects with probability power, for a difference with standard error se and df
// degrees of freedom: (t(1−alpha/2) + t(power))·se, the usual power formula with the t
// distribution in place of the normal (so small samples pay for their uncertain variance).
func DetectableShift(se, df, alpha, power float64) float64 {
	return (TQuantile(1-alpha/2, df) + TQuantile(power, df)) * se
}

// MADScale turns a median absolute deviation into an estimate of the standard deviation of
// normally distributed values (1/Φ⁻¹(3/4)).
const MADScale = 1.482602218505602

// MAD is the median absolute deviation of xs from their median (unscaled); NaN for no values.
func MAD(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	m := Median(Sorted(xs))
	dev := make([]float64, len(xs))
	for i, x := range xs {
		dev[i] = math.Abs(x - m)
	}
	return Median(Sorted(dev))
}

// Logs returns the natural logarithms of xs, or false when a value is not positive (a time or
// a size of zero has no logarithm; such a series is compared on its own scale by no one).
func Logs(xs []float64) ([]float64, bool) {
	out := make([]float64, len(xs))
	for i, x := range xs {
		if !(x > 0) || math.IsInf(x, 1) {
			return nil, false
		}
		out[i] = math.Log(x)
	}
	return out, true
}
