// Package nsysdb reads the SQLite exports of NVIDIA Nsight Systems (`nsys export --type
// sqlite`), of every schema version from nsys 2022.2 on, into the profiler-neutral trace model
// of reports/trace, so that triage treats nsys and torch-profiler runs alike, and builds the
// nsys-only tables (NVTX ranges, runtime API calls, memory operations, nsys stats reports).
//
// The big tables of an export (kernels, runtime calls, NVTX events) are read straight from
// SQLite's file format by a narrow read-only reader (sqlitefile.go, pages copied out
// of the page cache with pread), on several goroutines for the triage's lean read;
// anything it does not expect sends the table through modernc.org/sqlite, which reads
// everything else. docs/decisions.md says why.
//
// OpenStream and OpStream.Each (stream.go) deliver an export's GPU ops one at a time in time
// order without holding them, in memory that does not grow with the number of kernels, for
// exports that keep to its windows (tables close to time and call order; one process or
// several; NVTX ranges that nest per thread, each op handed over with its scope by
// OpStream.EachScoped, streamnvtx.go); ErrNotStreamable sends the others to ReadCapture.
//
// It starts no process and writes nothing.
package nsysdb
