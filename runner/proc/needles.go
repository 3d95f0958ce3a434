package proc

import "bytes"

// needles finds the first occurrence of any of a fixed set of substrings in
// a block of text, for Spec.Select. A gate looks for about fifteen markers in
// logs of hundreds of megabytes in which almost no line holds one, so the
// search must skip, not look at every byte: this is Wu and Manber's
// multi-pattern variant of Boyer-Moore-Horspool. It slides a window of the
// shortest needle's length m over the text and looks only at the window's
// last two bytes; unless those two bytes occur inside the first m bytes of
// some needle, no needle can start anywhere in the window and it moves by up
// to m-1 bytes at once. With sglang's markers (shortest 16 bytes) it
// advances about 13 bytes per step on ordinary log text.
//
// Each step waits for the previous one (the next position depends on the
// byte just read), so the text is cut in two halves scanned in the same loop:
// two independent chains keep the core busy and nearly double the speed, and
// both beat one bytes.Index per needle (figures in docs/performance.md).
// Needles shorter than blockLen are searched with bytes.Index.
type needles struct {
	list  [][]byte
	m     int                 // window: length of the shortest long needle
	shift [hashSize]uint8     // by block; 0 means "a window may end here"
	ends  map[uint16][]uint16 // block -> needles whose m-prefix ends with it
	short [][]byte            // needles shorter than blockLen
}

// A block is two bytes, so the shift table is indexed by them directly
// (64 KiB, no hashing): measured against three-byte blocks hashed into an
// L1-sized table, the shorter dependency chain per step wins at the same
// average shift on log text (figures in docs/performance.md).
const (
	blockLen = 2
	maxShift = 255
	hashSize = 1 << 16
)

// newNeedles compiles a needle set; empty needles are ignored and nil is
// returned when none is left.
func newNeedles(list []string) *needles {
	n := &needles{ends: map[uint16][]uint16{}}
	for _, s := range list {
		switch {
		case s == "":
		case len(s) < blockLen:
			n.short = append(n.short, []byte(s))
		default:
			n.list = append(n.list, []byte(s))
		}
	}
	if len(n.list) == 0 && len(n.short) == 0 {
		return nil
	}
	if len(n.list) == 0 {
		return n
	}
	n.m = len(n.list[0])
	for _, p := range n.list {
		n.m = min(n.m, len(p))
	}
	n.m = min(n.m, maxShift+blockLen-1)
	def := uint8(n.m - blockLen + 1)
	for i := range n.shift {
		n.shift[i] = def
	}
	for k, p := range n.list {
		for j := blockLen - 1; j < n.m; j++ {
			h := blockHash(p, j)
			if s := uint8(n.m - 1 - j); s < n.shift[h] {
				n.shift[h] = s
			}
		}
		h := blockHash(p, n.m-1)
		n.ends[h] = append(n.ends[h], uint16(k))
	}
	return n
}

// blockHash is the block of blockLen bytes ending at b[i].
func blockHash(b []byte, i int) uint16 {
	return uint16(b[i-1])<<8 | uint16(b[i])
}

// index returns the position of the leftmost occurrence of any needle in
// text, or -1.
func (n *needles) index(text []byte) int {
	best := -1
	for _, p := range n.short {
		if i := bytes.Index(text, p); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	if len(n.list) == 0 {
		return best
	}
	end := len(text)
	if best >= 0 {
		end = min(end, best+n.m) // a window ending later starts after best
	}
	if i := n.longIndex(text, end); i >= 0 && (best < 0 || i < best) {
		return i
	}
	return best
}

// longIndex finds the leftmost long needle whose window ends before end. The
// window ends are split at mid: the first chain covers [m-1, mid), the
// second [mid, end); once the second finds a match it stops and the first
// runs on alone, since a match of the first half is further left.
func (n *needles) longIndex(text []byte, end int) int {
	m := n.m
	i, mid := m-1, m-1+(end-m+1)/2
	j, jEnd, jHit := mid, end, -1
	for i < mid && j < jEnd {
		si, sj := n.shift[blockHash(text, i)], n.shift[blockHash(text, j)]
		if si == 0 {
			if n.matchAt(text, i) {
				return i - m + 1
			}
			si = 1
		}
		if sj == 0 {
			if n.matchAt(text, j) {
				jHit, jEnd = j-m+1, j
			}
			sj = 1
		}
		i += int(si)
		j += int(sj)
	}
	if k := n.scan(text, i, mid); k >= 0 {
		return k
	}
	if jHit >= 0 {
		return jHit
	}
	return n.scan(text, j, jEnd)
}

// scan is one chain: the leftmost match of a window ending in [i, end).
func (n *needles) scan(text []byte, i, end int) int {
	for i < end {
		s := n.shift[blockHash(text, i)]
		if s == 0 {
			if n.matchAt(text, i) {
				return i - n.m + 1
			}
			s = 1
		}
		i += int(s)
	}
	return -1
}

// matchAt reports whether a needle starts at the window that ends at i.
func (n *needles) matchAt(text []byte, i int) bool {
	start := i - n.m + 1
	for _, k := range n.ends[blockHash(text, i)] {
		if bytes.HasPrefix(text[start:], n.list[k]) {
			return true
		}
	}
	return false
}
