package sim

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/gzip"

	"github.com/sglprof/runner/nsys/nsysgen"
)

// The simulated .nsys-rep is a gzip stream. Format 1 was one JSON document (nsysReport, every
// record an object). Format 2, written now, is the same document with the four record lists
// left empty, a newline, then those lists in binary: a string table, then each list as a count
// and its records, every integer a varint and every string an index into the table. A 50-step
// image cell's report (tens of thousands of records) took a third of a simulated run's CPU to
// write and read as JSON; see BenchmarkReport for the figures. Format 1 is still read.
const reportFormat = 2

// Bounds on what readReport accepts, so that a damaged or hostile file costs at most memory in
// proportion to what it really holds: lists and strings grow as records arrive, never by a
// count the file states.
const (
	maxReportRecords = 1 << 26
	maxReportString  = 1 << 20
)

var errBadReport = errors.New("the file is not a valid Nsight Systems report or it is truncated")

func writeReport(path string, rep *nsysReport) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	err = encodeReport(zw, rep)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// encodeReport writes rep in format 2, whatever rep.Format says.
func encodeReport(w io.Writer, rep *nsysReport) error {
	head := *rep
	head.Format = reportFormat
	head.Kernels, head.Runtime, head.Memops, head.NVTX = nil, nil, nil, nil
	bw := bufio.NewWriterSize(w, 64<<10)
	if err := json.NewEncoder(bw).Encode(&head); err != nil { // ends in '\n'
		return err
	}
	e := reportEncoder{ids: map[string]uint64{}}
	for _, k := range rep.Kernels {
		e.str(k.Name)
		e.str(k.Short)
	}
	for _, r := range rep.Runtime {
		e.str(r.Name)
	}
	for _, n := range rep.NVTX {
		e.str(n.Text)
		e.str(n.Domain)
	}
	b := binary.AppendUvarint(nil, uint64(len(e.strs)))
	for _, s := range e.strs {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	var werr error
	// spill hands b to bw once it holds more than over bytes; the first write error sticks.
	spill := func(b []byte, over int) []byte {
		if len(b) > over && werr == nil {
			_, werr = bw.Write(b)
			b = b[:0]
		}
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(rep.Kernels)))
	for _, k := range rep.Kernels {
		b = appendInts(b, k.Start, k.End, int64(k.Device), int64(k.Stream), k.Correlation)
		b = binary.AppendUvarint(binary.AppendUvarint(b, e.ids[k.Name]), e.ids[k.Short])
		b = appendInts(b, int64(k.GridX), int64(k.GridY), int64(k.GridZ), int64(k.BlockX), int64(k.BlockY), int64(k.BlockZ), int64(k.PID), int64(k.TID))
		b = spill(b, 32<<10)
	}
	b = binary.AppendUvarint(b, uint64(len(rep.Runtime)))
	for _, r := range rep.Runtime {
		b = appendInts(b, r.Start, r.End, int64(r.PID), int64(r.TID), r.Correlation)
		b = append(binary.AppendUvarint(b, e.ids[r.Name]), boolByte(r.Driver))
		b = spill(b, 32<<10)
	}
	b = binary.AppendUvarint(b, uint64(len(rep.Memops)))
	for _, m := range rep.Memops {
		b = appendInts(b, m.Start, m.End, int64(m.Device), int64(m.Stream), m.Correlation, m.Bytes, int64(m.CopyKind), int64(m.PID))
		b = append(b, boolByte(m.Memset))
		b = spill(b, 32<<10)
	}
	b = binary.AppendUvarint(b, uint64(len(rep.NVTX)))
	for _, n := range rep.NVTX {
		b = appendInts(b, n.Start, n.End, int64(n.PID), int64(n.TID))
		b = binary.AppendUvarint(binary.AppendUvarint(b, e.ids[n.Text]), e.ids[n.Domain])
		b = spill(b, 32<<10)
	}
	spill(b, 0)
	if werr != nil {
		return werr
	}
	return bw.Flush()
}

// reportEncoder numbers the distinct strings of a report in the order first seen.
type reportEncoder struct {
	ids  map[string]uint64
	strs []string
}

func (e *reportEncoder) str(s string) {
	if _, ok := e.ids[s]; !ok {
		e.ids[s] = uint64(len(e.strs))
		e.strs = append(e.strs, s)
	}
}

func appendInts(b []byte, vs ...int64) []byte {
	for _, v := range vs {
		b = binary.AppendVarint(b, v)
	}
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func readReport(path string) (*nsysReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, errors.New("the file is not a valid Nsight Systems report")
	}
	return decodeReport(zr)
}

// decodeReport reads a report of format 1 or 2.
func decodeReport(r io.Reader) (*nsysReport, error) {
	dec := json.NewDecoder(r)
	var rep nsysReport
	if err := dec.Decode(&rep); err != nil || rep.Magic != reportMagic {
		return nil, errBadReport
	}
	switch rep.Format {
	case 1:
		return &rep, nil
	case reportFormat:
		if rep.Kernels != nil || rep.Runtime != nil || rep.Memops != nil || rep.NVTX != nil {
			return nil, errBadReport
		}
	default:
		return nil, fmt.Errorf("the report is of format %d, which this simulator does not know; record it again", rep.Format)
	}
	d := reportDecoder{r: bufio.NewReaderSize(io.MultiReader(dec.Buffered(), r), 64<<10)}
	if b, err := d.r.ReadByte(); err != nil || b != '\n' {
		return nil, errBadReport
	}
	d.strings()
	n := d.count()
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := nsysgen.Kernel{Start: d.int(), End: d.int(), Device: d.i32(), Stream: d.i32(), Correlation: d.int(), Name: d.str(), Short: d.str(),
			GridX: d.i32(), GridY: d.i32(), GridZ: d.i32(), BlockX: d.i32(), BlockY: d.i32(), BlockZ: d.i32(), PID: d.i32(), TID: d.i32()}
		rep.Kernels = append(rep.Kernels, k)
	}
	n = d.count()
	for i := uint64(0); i < n && d.err == nil; i++ {
		rt := nsysgen.Runtime{Start: d.int(), End: d.int(), PID: d.i32(), TID: d.i32(), Correlation: d.int(), Name: d.str(), Driver: d.bool()}
		rep.Runtime = append(rep.Runtime, rt)
	}
	n = d.count()
	for i := uint64(0); i < n && d.err == nil; i++ {
		m := nsysgen.Memop{Start: d.int(), End: d.int(), Device: d.i32(), Stream: d.i32(), Correlation: d.int(), Bytes: d.int(), CopyKind: d.i32(), PID: d.i32(), Memset: d.bool()}
		rep.Memops = append(rep.Memops, m)
	}
	n = d.count()
	for i := uint64(0); i < n && d.err == nil; i++ {
		nv := nsysgen.NVTX{Start: d.int(), End: d.int(), PID: d.i32(), TID: d.i32(), Text: d.str(), Domain: d.str()}
		rep.NVTX = append(rep.NVTX, nv)
	}
	if d.err != nil {
		return nil, errBadReport
	}
	if _, err := d.r.ReadByte(); err != io.EOF {
		return nil, errBadReport // something after the last list
	}
	return &rep, nil
}

// reportDecoder reads format 2's binary part; the first error sticks, and every read after it
// returns zero.
type reportDecoder struct {
	r    *bufio.Reader
	strs []string
	err  error
}

func (d *reportDecoder) fail() {
	if d.err == nil {
		d.err = errBadReport
	}
}

func (d *reportDecoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d.r)
	if err != nil {
		d.fail()
	}
	return v
}

func (d *reportDecoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(d.r)
	if err != nil {
		d.fail()
	}
	return v
}

func (d *reportDecoder) i32() int32 {
	v := d.int()
	if int64(int32(v)) != v {
		d.fail()
	}
	return int32(v)
}

func (d *reportDecoder) bool() bool {
	if d.err != nil {
		return false
	}
	b, err := d.r.ReadByte()
	if err != nil || b > 1 {
		d.fail()
	}
	return b == 1
}

func (d *reportDecoder) count() uint64 {
	n := d.uint()
	if n > maxReportRecords {
		d.fail()
		return 0
	}
	return n
}

func (d *reportDecoder) str() string {
	i := d.uint()
	if i >= uint64(len(d.strs)) {
		d.fail()
		return ""
	}
	return d.strs[i]
}

// strings reads the string table.
func (d *reportDecoder) strings() {
	n := d.count()
	for i := uint64(0); i < n && d.err == nil; i++ {
		l := d.uint()
		if l > maxReportString {
			d.fail()
			return
		}
		b := make([]byte, l)
		if _, err := io.ReadFull(d.r, b); err != nil {
			d.fail()
			return
		}
		d.strs = append(d.strs, string(b))
	}
}
