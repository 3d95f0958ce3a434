//go:build !linux

package trace

// AdviseHuge does nothing outside Linux (hugepage_linux.go says why it exists).
func AdviseHuge[T any](s []T) {}

// Prefault does nothing outside Linux (hugepage_linux.go says why it exists).
func Prefault[T any](s []T, from, to int) {}
