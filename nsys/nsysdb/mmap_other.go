//go:build !unix

package nsysdb

import "os"

// mapFile maps nothing where there is no mmap: the scans read with ReadAt.
func mapFile(*os.File, int64) []byte { return nil }

func unmapFile([]byte) error { return nil }

func releaseMapped([]byte) {}
