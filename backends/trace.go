package backends

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/plans/infile"
)

// CheckTrace reads a gzip trace through to its end and reports whether it is a complete,
// valid gzip stream (every member's CRC and length checked). It does not parse the JSON: a
// complete gzip stream is what sglang's own integrity check promises, and a truncated one is
// the common failure when a run is stopped while the profiler exports.
func CheckTrace(path string) error {
	f, err := infile.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty file")
		}
		return fmt.Errorf("not a gzip file: %w", err)
	}
	defer zr.Close()
	n, err := io.Copy(io.Discard, zr)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("truncated gzip stream (ends after %d decompressed bytes): %w", n, err)
	default:
		return fmt.Errorf("corrupt gzip stream after %d decompressed bytes: %w", n, err)
	}
}

// HasKernel streams a gzip torch-profiler trace looking for a kernel event: a trace without
// one captured no GPU work.
func HasKernel(path string) bool {
	f, err := infile.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return false
	}
	needles := [][]byte{[]byte(`"cat": "kernel"`), []byte(`"cat":"kernel"`)}
	buf := make([]byte, 1<<20)
	var carry []byte
	for {
		n, err := zr.Read(buf)
		chunk := append(carry, buf[:n]...)
		for _, nd := range needles {
			if bytes.Contains(chunk, nd) {
				return true
			}
		}
		if len(chunk) > 32 {
			carry = append(carry[:0], chunk[len(chunk)-32:]...)
		}
		if err != nil {
			return false
		}
	}
}
