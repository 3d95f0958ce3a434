//go:build !linux

package trace

// AdviseHuge does nothing outside Linux (hugepage_linux.go says why it exists).
func AdviseHuge[T any](s []T) {}

// Prefault does nothing outside Linux (hugepage_linux.go says why it exists).
func Prefault[T any](s []T, from, to int) {}

// MakeHuge is make([]T, n) outside Linux (hugepage_linux.go says why it exists).
func MakeHuge[T any](n int) []T { return make([]T, n) }
