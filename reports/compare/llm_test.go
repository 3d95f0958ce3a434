package compare

import (
	"testing"

	"github.com/sglprof/runner/reports/perf"
)

// Latencies regress upwards, throughputs downwards.
func TestCompareDirections(t *testing.T) {
	lo := []float64{100, 101, 99, 100, 102, 98, 100, 101}
	hi := []float64{150, 151, 149, 150, 152, 148, 150, 151}
	opts := Options{}
	opts.defaults()
	cases := []struct {
		metric    string
		base, cur []float64
		want      string
	}{
		{perf.MetricTTFT, lo, hi, StatusRegression},
		{perf.MetricTPOT, hi, lo, StatusImprovement},
		{perf.MetricOutputThroughput, hi, lo, StatusRegression},
		{perf.MetricOutputThroughput, lo, hi, StatusImprovement},
		{perf.MetricGoodput, hi, lo, StatusRegression},
	}
	for _, c := range cases {
		r := compareMetric("k", c.metric, &perf.Config{Metrics: map[string][]float64{c.metric: c.base}}, &perf.Config{Metrics: map[string][]float64{c.metric: c.cur}}, &opts)
		if r.Status != c.want || !(r.P < 0.05) {
			t.Errorf("%s %v -> %v: status %q p %v, want %q", c.metric, c.base[0], c.cur[0], r.Status, r.P, c.want)
		}
	}
	if got := opts.ToleranceFor(perf.MetricTPOT).Text; got != "10%" {
		t.Errorf("tpot default tolerance %q", got)
	}
	if got := FormatValue(1234.56, perf.UnitTokensPS); got != "1234.6tok/s" {
		t.Errorf("FormatValue = %q", got)
	}
}
