package proc

import (
	"strings"
	"testing"
)

func TestTailBuffer(t *testing.T) {
	var b tailBuffer
	b.Write([]byte(strings.Repeat("a", commandTail)))
	b.Write([]byte("the end"))
	s := b.String()
	if !strings.HasPrefix(s, "…") || !strings.HasSuffix(s, "the end") || len(s) != commandTail+len("…") {
		t.Errorf("tail of %d bytes: prefix %q suffix %q", len(s), s[:8], s[len(s)-8:])
	}
}
