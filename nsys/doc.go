// Package nsys is the command-line side of NVIDIA Nsight Systems: wrapping a cell's argv in
// `nsys profile` (Wrap, WrapServer), the session commands that open and close a capture on a
// running server (Launch, SessionStartArgv, SessionStopArgv, SessionShutdownArgv, Session),
// checking before a sweep that nsys is installed (Check), turning the finished .nsys-rep
// report into a SQLite export with `nsys export --type sqlite` (Export), and the paths of the
// report and export beside a cell.
//
// Reading the exports is the job of the sub-package nsysdb; writing synthetic ones for tests
// and the simulator is nsysgen's. This package starts no process itself: Check, Export and
// Session build the command line, run it through the Exec they are given (the runner passes
// proc.Command, its one process owner, which this lower layer cannot import) and explain
// nsys's failures; Wrap and the path helpers are pure.
package nsys
