package render

import (
	"html"
	"html/template"
	"strings"
)

// keyAxes tells keys apart by the parts in which they differ. Keys are '/'-separated
// ("model/size/steps/seed/p<prompt hash>/…"); when every key has as many parts, a part that all
// keys share at its position is common and the others are the key's label ("512x512",
// "tp-size=2"). common is the shared key with "*" where the keys differ; labels[i] is keys[i]'s
// differing parts joined by "/". One distinct key: common is that key and every label is "".
// Keys of different lengths are not aligned: common is "" and every label is the whole key.
// A page that shows the label in a row and common once above it stays narrow and its rows
// stay distinguishable, where whole keys (or keys cut to fit) read alike up to their last part.
func keyAxes(keys []string) (common string, labels []string) {
	labels = make([]string, len(keys))
	if len(keys) == 0 {
		return "", labels
	}
	parts := make([][]string, len(keys))
	for i, k := range keys {
		parts[i] = strings.Split(k, "/")
		if len(parts[i]) != len(parts[0]) {
			copy(labels, keys)
			return "", labels
		}
	}
	n := len(parts[0])
	differs := make([]bool, n)
	for j := range n {
		for i := range parts {
			differs[j] = differs[j] || parts[i][j] != parts[0][j]
		}
	}
	shared := make([]string, n)
	for j := range n {
		shared[j] = parts[0][j]
		if differs[j] {
			shared[j] = "*"
		}
	}
	for i := range keys {
		var own []string
		for j := range n {
			if differs[j] {
				own = append(own, parts[i][j])
			}
		}
		labels[i] = strings.Join(own, "/")
	}
	return strings.Join(shared, "/"), labels
}

// breakable escapes an identifier (a cell id, a configuration key) for HTML and lets it wrap
// after its separators ("-", "/", "=", "_") and nowhere else: a narrow column then shows the
// whole id on a few lines, split between its tokens, instead of cutting it or breaking
// "1024x1024" in the middle.
func breakable(s string) template.HTML {
	var b strings.Builder
	for _, r := range s {
		b.WriteString(html.EscapeString(string(r)))
		switch r {
		case '-', '/', '=', '_':
			b.WriteString("<wbr>")
		}
	}
	return template.HTML(b.String()) // every rune escaped above
}
