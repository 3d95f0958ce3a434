package load

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The Prometheus text exposition format (version 0.0.4), read just far enough to pick gauge,
// counter and untyped values by name: what a /metrics scrape needs. It replaces the Prometheus
// project's parser (github.com/prometheus/common/expfmt), whose package brings the protobuf
// runtime, a grammar package that imports testing and go/format, and their initialisers into
// the binary, which ran in every process the runner starts (each cell's supervisor and
// simulator included): about 30 page faults, 4 % of a process start (docs/performance.md, "go
// test on a warm build cache"). The tests keep expfmt as the oracle:
// FuzzPromTextAgreesWithExpfmt reads every page both ways.
//
// What is read: `# TYPE name type` lines (other comments and `# HELP` are skipped), and sample
// lines `name{label="value",...} value [timestamp]`, the name also as the UTF-8 form's quoted
// first element inside the braces (`{"name",label="value"} 1`). Samples of histograms and
// summaries (the family's own name and its _bucket, _sum and _count series) are not values of
// their family and are left out. A malformed line fails the whole page, as it did with expfmt;
// unlike expfmt, a second TYPE line or a repeated label is not checked, since nothing here
// depends on either.

// promValues maps each gauge, counter and untyped sample name of a page to its series' values,
// in page order.
type promValues map[string][]float64

// parsePromText reads one page.
func parsePromText(b []byte) (promValues, error) {
	types := map[string]string{}
	vals := promValues{}
	for n := 1; len(b) > 0; n++ {
		var line []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		line = bytes.TrimRight(line, " \t\r")
		line = bytes.TrimLeft(line, " \t")
		if len(line) == 0 {
			continue
		}
		if line[0] == '#' {
			if err := promComment(line, types); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			continue
		}
		name, v, err := promSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if promSkipped(name, types) {
			continue
		}
		vals[name] = append(vals[name], v)
	}
	return vals, nil
}

// promComment records a TYPE line's type; every other comment is skipped.
func promComment(line []byte, types map[string]string) error {
	f := strings.Fields(string(line[1:]))
	if len(f) < 3 || f[0] != "TYPE" {
		return nil // a comment (as the Prometheus parser takes a TYPE line without a type)
	}
	if len(f) > 3 {
		return errors.New("a TYPE line has a metric name and a type, nothing more")
	}
	name := f[1]
	if q, rest, err := promQuoted(name); err == nil && rest == "" {
		name = q
	}
	switch f[2] {
	case "counter", "gauge", "histogram", "summary", "untyped":
	default:
		return fmt.Errorf("unknown metric type %q", f[2])
	}
	types[name] = f[2]
	return nil
}

// promSkipped reports whether a sample named name is part of a histogram or summary.
func promSkipped(name string, types map[string]string) bool {
	if t, ok := types[name]; ok {
		return t == "histogram" || t == "summary"
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if t := types[base]; t == "histogram" || (t == "summary" && suf != "_bucket") {
				return true
			}
		}
	}
	return false
}

// promSample reads one sample line: its metric name and value (the labels are checked for form
// and dropped; so is a timestamp).
func promSample(line []byte) (string, float64, error) {
	s := string(line)
	i := 0
	for i < len(s) && promNameByte(s[i], i == 0) {
		i++
	}
	name, s := s[:i], strings.TrimLeft(s[i:], " \t")
	if strings.HasPrefix(s, "{") {
		quoted, rest, err := promLabels(s[1:])
		if err != nil {
			return "", 0, err
		}
		if quoted != "" {
			if name != "" {
				return "", 0, errors.New("a metric name both before and inside the braces")
			}
			name = quoted
		}
		s = rest
	}
	if name == "" {
		return "", 0, errors.New("a sample without a metric name")
	}
	f := strings.Fields(s)
	if len(f) < 1 || len(f) > 2 {
		return "", 0, fmt.Errorf("%s: want a value and an optional timestamp after the name and labels", name)
	}
	// As the Prometheus parser: Go's float syntax less hexadecimal mantissas and underscores, and
	// no out-of-range values.
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || strings.ContainsAny(f[0], "pP_") {
		return "", 0, fmt.Errorf("%s: bad value %q", name, f[0])
	}
	if len(f) == 2 {
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			return "", 0, fmt.Errorf("%s: bad timestamp %q", name, f[1])
		}
	}
	return name, v, nil
}

// promLabels reads the labels after a '{' up to and including the closing '}'. A quoted string
// standing alone (no '=' after it) is the UTF-8 form's metric name, returned as quoted.
func promLabels(s string) (quoted, rest string, err error) {
	for {
		s = strings.TrimLeft(s, " \t")
		if strings.HasPrefix(s, "}") {
			return quoted, s[1:], nil
		}
		var key string
		wasQuoted := strings.HasPrefix(s, `"`)
		if wasQuoted {
			if key, s, err = promQuoted(s); err != nil {
				return "", "", err
			}
			s = strings.TrimLeft(s, " \t")
		} else {
			i := 0
			for i < len(s) && promLabelByte(s[i], i == 0) {
				i++
			}
			if i == 0 {
				return "", "", errors.New("a label name is missing or invalid")
			}
			key, s = s[:i], strings.TrimLeft(s[i:], " \t")
		}
		switch {
		case strings.HasPrefix(s, "="):
			if _, s, err = promQuoted(strings.TrimLeft(s[1:], " \t")); err != nil {
				return "", "", fmt.Errorf("label %s: %w", key, err)
			}
		case wasQuoted && quoted == "" && key != "":
			quoted = key // a quoted string alone: the metric name
		default:
			return "", "", fmt.Errorf("label %s: want = after the name", key)
		}
		s = strings.TrimLeft(s, " \t")
		switch {
		case strings.HasPrefix(s, ","):
			s = s[1:]
		case strings.HasPrefix(s, "}"):
		default:
			return "", "", errors.New("want , or } after a label")
		}
	}
}

// promQuoted reads a double-quoted string with the format's escapes (\\, \" and \n).
func promQuoted(s string) (string, string, error) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", errors.New(`want a "quoted" value`)
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], nil
		case '\\':
			i++
			if i == len(s) {
				return "", "", errors.New("unterminated quoted value")
			}
			switch s[i] {
			case '\\', '"':
				b.WriteByte(s[i])
			case 'n':
				b.WriteByte('\n')
			default:
				return "", "", fmt.Errorf(`invalid escape \%c in a quoted value`, s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("unterminated quoted value")
}

func promNameByte(c byte, first bool) bool {
	return c == ':' || promLabelByte(c, first)
}

func promLabelByte(c byte, first bool) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9')
}
