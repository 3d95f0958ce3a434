package load

import (
	"math"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// expfmtValues reads a page with the Prometheus project's parser, the oracle: each family's
// gauge, counter and untyped values by name, in page order.
func expfmtValues(page string) (promValues, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(page))
	if err != nil {
		return nil, err
	}
	out := promValues{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_GAUGE:
				out[name] = append(out[name], m.GetGauge().GetValue())
			case dto.MetricType_COUNTER:
				out[name] = append(out[name], m.GetCounter().GetValue())
			case dto.MetricType_UNTYPED:
				out[name] = append(out[name], m.GetUntyped().GetValue())
			}
		}
	}
	return out, nil
}

func sameValues(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return x == y || (math.IsNaN(x) && math.IsNaN(y)) })
}

// agree checks parsePromText against expfmt on one page: where expfmt reads a page, so must
// parsePromText, with the same values; a page expfmt refuses may still be read (parsePromText
// does not check repeated TYPE lines, labels or HELP escapes, which nothing here uses).
func agree(t *testing.T, page string) {
	t.Helper()
	want, werr := expfmtValues(page)
	got, err := parsePromText([]byte(page))
	if werr != nil {
		return
	}
	if err != nil {
		t.Fatalf("expfmt reads %q, parsePromText does not: %v", page, err)
	}
	for name, w := range want {
		if !sameValues(got[name], w) {
			t.Fatalf("%q: %s = %v, expfmt %v", page, name, got[name], w)
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			t.Fatalf("%q: %s = %v, which expfmt does not have", page, name, g)
		}
	}
}

func TestPromTextAgreesWithExpfmt(t *testing.T) {
	for _, page := range []string{
		sglangPage, vllmPage,
		"a 1\nb{x=\"1\"} 2 1700000000000\n",
		"# TYPE a summary\na_sum 1\na_count 2\na_bucket 3\na{quantile=\"0.5\"} 4\n",
		"# TYPE a histogram\na_bucket{le=\"1\"} 1\na_bucket{le=\"+Inf\"} 1\na_sum 1\na_count 1\n",
		"# TYPE a gauge\na_count 1\n",
		"a_sum 1\n# TYPE a summary\n",
		"  a{x=\"a\\\\b\\\"c\\nd\" , y=\"\",} -Inf\n\n#comment\n#TYPE b counter\nb NaN\n",
		"{\"a.b\",x=\"1\"} 3\n# TYPE \"c.d\" gauge\n{\"c.d\"} 4\n",
		"a {x=\"1\"} 1e3\n",
		"a-1\n",
		"a 1e400\n", "a 0x1p3\n", "a 1_0\n", "a 1 2 3\n", "a{x} 1\n", "a{x=\"\\q\"} 1\n", "# TYPE a bogus\n",
	} {
		agree(t, page)
	}
	// And a few that must be refused.
	for _, page := range []string{"a\n", "a{x=\"1\" 1\n", "{} 1\n", "a 1 z\n", "a{1=\"2\"} 3\n"} {
		if _, err := parsePromText([]byte(page)); err == nil {
			t.Errorf("%q read without an error", page)
		}
	}
}

// FuzzPromTextAgreesWithExpfmt holds the parser to the Prometheus project's on any page.
func FuzzPromTextAgreesWithExpfmt(f *testing.F) {
	f.Add(sglangPage)
	f.Add(vllmPage)
	f.Add("# TYPE a summary\na_sum 1\na_count 2\na_bucket 3\n{\"b\",c=\"d\"} 1 2\n")
	f.Fuzz(agree)
}
