package engine

// Architectures at hello. A host and a device process may run on different
// CPU architectures: the code is the same, built with another GOARCH. The
// protocol's frames do not depend on the architecture (proto.AppendArgs),
// but device memory crosses as bytes. So a slice element, a declare target
// variable or a scalar parameter must have the same size, field offsets and
// byte order on both sides. Each side's hello states its architecture and
// one short hash per type its kernels take; the side that checks the
// kernel table compares them and names what differs.

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// archFacts are what a process's architecture decides about memory. word is
// the size of int, uint, uintptr and pointers. align8 is the alignment of
// 8-byte values (4 on 386, arm and mips32). The last is the byte order.
type archFacts struct {
	arch   string // GOARCH
	word   int
	align8 int
	big    bool // big-endian
}

// thisArch is this process's archFacts.
func thisArch() archFacts {
	var x uint16 = 1
	return archFacts{
		arch:   runtime.GOARCH,
		word:   int(unsafe.Sizeof(uintptr(0))),
		align8: int(unsafe.Alignof(uint64(0))),
		big:    *(*byte)(unsafe.Pointer(&x)) == 0,
	}
}

func (a archFacts) order() string {
	if a.big {
		return "be"
	}
	return "le"
}

// String is the facts as a hello says them: "amd64/8/8/le".
func (a archFacts) String() string {
	return fmt.Sprintf("%s/%d/%d/%s", a.arch, a.word, a.align8, a.order())
}

// describe is "amd64: 64-bit, little-endian", for messages.
func (a archFacts) describe() string {
	order := "little-endian"
	if a.big {
		order = "big-endian"
	}
	return fmt.Sprintf("%s: %d-bit, %s", a.arch, a.word*8, order)
}

func parseArch(s string) (archFacts, bool) {
	f := strings.Split(s, "/")
	if len(f) != 4 || f[0] == "" || len(f[0]) > 16 {
		return archFacts{}, false
	}
	for _, c := range f[0] {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return archFacts{}, false
		}
	}
	w, err1 := strconv.Atoi(f[1])
	a, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || (w != 4 && w != 8) || (a != 4 && a != 8) || (f[3] != "le" && f[3] != "be") {
		return archFacts{}, false
	}
	return archFacts{arch: f[0], word: w, align8: a, big: f[3] == "be"}, true
}

// layout is what a hello says about a kernel table's memory. It lists the
// types of the kernels' parameters (slice elements, scalars, a struct's
// fields). Each is listed once, in the order they first appear in the table.
// It lists the element type of each declare target variable too. Each comes
// with the hash of its layout here.
//
// A slice's elements cross as bytes: their sizes, offsets and byte order must
// agree. A scalar crosses field by field (proto.AppendArgs), so only the
// sizes of its values must. A type is listed once as each.
type layout struct {
	arch    archFacts
	types   []reflect.Type
	scalar  []bool   // of types: listed as a scalar's type, not as memory
	uses    []string // where each type is first taken: `kernel "k", its []int parameter`
	sums    []uint32 // of types
	globals []*entries.Global
	gsums   []uint32 // of globals' elements
}

// layoutOf is the layout of kernels ks and variables gs in this process.
func layoutOf(ks []plugin.Kernel, gs []*entries.Global) *layout {
	l := &layout{arch: thisArch(), globals: gs}
	type key struct {
		t      reflect.Type
		scalar bool
	}
	seen := map[key]bool{}
	for _, k := range ks {
		if k.Name() == entries.BindKernelName {
			// Its scalars are small numbers of the runtime's; the
			// variables it binds are checked as variables.
			continue
		}
		for _, p := range k.Params() {
			kk := key{p.Type, p.Kind == plugin.Scalar}
			if !seen[kk] {
				seen[kk] = true
				l.types = append(l.types, p.Type)
				l.scalar = append(l.scalar, kk.scalar)
				l.uses = append(l.uses, fmt.Sprintf("kernel %q, %s", k.Name(), paramText(p)))
				if kk.scalar {
					l.sums = append(l.sums, sum(valueText(p.Type)))
				} else {
					l.sums = append(l.sums, layoutSum(p.Type))
				}
			}
		}
	}
	for _, g := range gs {
		l.gsums = append(l.gsums, layoutSum(g.Elem))
	}
	return l
}

// layoutSum hashes t's layout in this process: its size, and each field's
// offset, kind, size and byte order, recursively. Alignment is left out.
// Where it matters, it moves an offset or changes a size.
func layoutSum(t reflect.Type) uint32 { return sum(layoutText(t, thisArch())) }

func sum(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// valueText describes the values of scalar type t as they cross: each field's
// kind and size, in order ("{i4 i8}"). It leaves out offsets and byte order,
// which the wire's encoding hides.
func valueText(t reflect.Type) string {
	var b strings.Builder
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		switch t.Kind() {
		case reflect.Struct:
			b.WriteByte('{')
			for i := 0; i < t.NumField(); i++ {
				if i > 0 {
					b.WriteByte(' ')
				}
				walk(t.Field(i).Type)
			}
			b.WriteByte('}')
		case reflect.Array:
			fmt.Fprintf(&b, "[%d]", t.Len())
			walk(t.Elem())
		default:
			fmt.Fprintf(&b, "%c%d", kindLetter(t.Kind()), t.Size())
		}
	}
	walk(t)
	return b.String()
}

// layoutText describes t's layout in this process (which has arch a), as
// layoutSum hashes it. struct{ A float32; B int64 } on amd64 is "{16 f4<@0
// i8<@8}". A multi-byte value has its byte order ("<": little-endian).
func layoutText(t reflect.Type, a archFacts) string {
	var b strings.Builder
	writeLayout(&b, t, a)
	return b.String()
}

func writeLayout(b *strings.Builder, t reflect.Type, a archFacts) {
	switch t.Kind() {
	case reflect.Struct:
		fmt.Fprintf(b, "{%d", t.Size())
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			b.WriteByte(' ')
			writeLayout(b, f.Type, a)
			fmt.Fprintf(b, "@%d", f.Offset)
		}
		b.WriteByte('}')
	case reflect.Array:
		fmt.Fprintf(b, "[%d]", t.Len())
		writeLayout(b, t.Elem(), a)
	default:
		fmt.Fprintf(b, "%c%d", kindLetter(t.Kind()), t.Size())
		if t.Size() > 1 || t.Kind() == reflect.Complex64 || t.Kind() == reflect.Complex128 {
			if a.big {
				b.WriteByte('>')
			} else {
				b.WriteByte('<')
			}
		}
	}
}

func kindLetter(k reflect.Kind) byte {
	switch k {
	case reflect.Bool:
		return 'b'
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return 'i'
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return 'u'
	case reflect.Float32, reflect.Float64:
		return 'f'
	case reflect.Complex64, reflect.Complex128:
		return 'c'
	}
	return '?' // not plain data: RegisterKernel refused it
}

// maxSums is the most hashes a hello lists one by one (8 hex digits each,
// well inside proto.MaxText). A longer list travels as one hash of all. A
// mismatch then names the first type that depends on the architecture.
const maxSums = 2048

// sumsText is a hello's field value for sums: their hex digits, or "#" and
// the hash of them all.
func sumsText(sums []uint32) string {
	if len(sums) > maxSums {
		return "#" + hex.EncodeToString(binary.BigEndian.AppendUint32(nil, sumsOf(sums)))
	}
	b := make([]byte, 0, 4*len(sums))
	for _, s := range sums {
		b = binary.BigEndian.AppendUint32(b, s)
	}
	return hex.EncodeToString(b)
}

// sumList is the sums a hello listed, or the one hash of all it sent.
type sumList struct {
	sums []uint32
	all  uint32
	one  bool // the list is the hash of all
}

func parseSums(s string) (sumList, bool) {
	if rest, ok := strings.CutPrefix(s, "#"); ok {
		b, err := hex.DecodeString(rest)
		if err != nil || len(b) != 4 {
			return sumList{}, false
		}
		return sumList{all: binary.BigEndian.Uint32(b), one: true}, true
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b)%4 != 0 || len(b)/4 > maxSums {
		return sumList{}, false
	}
	l := sumList{sums: make([]uint32, len(b)/4)}
	for i := range l.sums {
		l.sums[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return l, true
}

// differ lists the indexes at which the peer's sums differ from mine. With
// one hash of all, it is every index of a type that depends on the
// architectures. If none does, it is every index: the hashes say the layouts
// differ. ok is false where the lists cannot be compared (lengths differ).
func (l sumList) differ(mine []uint32, depends func(i int) bool) (idx []int, ok bool) {
	if l.one {
		if sumsOf(mine) == l.all {
			return nil, true
		}
		for i := range mine {
			if depends(i) {
				idx = append(idx, i)
			}
		}
		if idx == nil {
			for i := range mine {
				idx = append(idx, i)
			}
		}
		return idx, true
	}
	if len(l.sums) != len(mine) {
		return nil, false
	}
	for i := range mine {
		if l.sums[i] != mine[i] {
			idx = append(idx, i)
		}
	}
	return idx, true
}

// sumsOf is the hash of all of sums, as sumsText sends a long list.
func sumsOf(sums []uint32) uint32 {
	b := make([]byte, 0, 4*len(sums))
	for _, x := range sums {
		b = binary.BigEndian.AppendUint32(b, x)
	}
	h := fnv.New32a()
	h.Write(b)
	return h.Sum32()
}

// maxNamed is how many differing types a refusal names.
const maxNamed = 3

// checkLayout compares the peer's layout (from its hello) with mine. Mine is
// the layout of the first peer.count kernels of this side's table, which
// already match the peer's by digest. It names each kernel parameter and
// declare target variable whose type is laid out differently (the first
// maxNamed). It refuses a peer of another word size or byte order even where
// no type shows it. self is "host" or "device". A peer whose hello says no
// architecture (a build from before) is not checked.
func checkLayout(peer hello, mine *layout, self string) error {
	if !peer.hasArch {
		return nil
	}
	other := "host"
	if self == "host" {
		other = "device"
	}
	on := map[string]archFacts{self: mine.arch, other: peer.arch}
	hostA, devA := on["host"], on["device"]
	var named []string
	more := 0
	name := func(s string) {
		if len(named) < maxNamed {
			named = append(named, s)
		} else {
			more++
		}
	}
	scalarFacts := func(i int) (archFacts, archFacts) {
		if !mine.scalar[i] {
			return hostA, devA
		}
		// Only the word size shows in a scalar's values.
		h, d := hostA, devA
		h.align8, h.big = d.align8, d.big
		return h, d
	}
	idx, ok := peer.types.differ(mine.sums, func(i int) bool {
		h, d := scalarFacts(i)
		return explain(mine.types[i], h, d) != ""
	})
	if !ok {
		return fmt.Errorf("%w: the %s's hello lists %d parameter types, the %s's table %d: host and device were built from different code", ErrMismatch, other, len(peer.types.sums), self, len(mine.sums))
	}
	for _, i := range idx {
		h, d := scalarFacts(i)
		name(fmt.Sprintf("%s: %s", mine.uses[i], why(mine.types[i], mine.scalar[i], h, d)))
	}
	if len(mine.globals) > 0 && peer.hasGlobals {
		n := min(len(mine.globals), len(peer.globals.sums))
		gs := mine.gsums[:n]
		if peer.globals.one {
			gs = mine.gsums
		}
		gidx, ok := peer.globals.differ(gs, func(i int) bool { return explain(mine.globals[i].Elem, hostA, devA) != "" })
		if ok {
			for _, i := range gidx {
				g := mine.globals[i]
				name(fmt.Sprintf("%s: %s", g.Describe(), why(g.Elem, false, hostA, devA)))
			}
		}
	}
	if len(named) > 0 {
		s := strings.Join(named, "; ")
		if more > 0 {
			s += fmt.Sprintf("; and %d more", more)
		}
		return fmt.Errorf("%w: the host (%s) and the device (%s) lay out memory differently, so values would cross wrong: %s", ErrMismatch, hostA.describe(), devA.describe(), s)
	}
	if hostA.word != devA.word {
		return fmt.Errorf("%w: the host is %s and the device %s: device addresses and lengths are 64-bit on the wire, more than a 32-bit process holds, so host and device must have the same word size", ErrMismatch, hostA.describe(), devA.describe())
	}
	if hostA.big != devA.big {
		return fmt.Errorf("%w: the host is %s and the device %s: device memory crosses as bytes, so every value of more than one byte would arrive byte-swapped", ErrMismatch, hostA.describe(), devA.describe())
	}
	return nil
}

// paramText names parameter p of a kernel: "its []int parameter", "its int
// parameter", "field B (int) of its main.S parameter".
func paramText(p plugin.Param) string {
	switch {
	case p.Field >= 0 && p.Struct != nil && p.Field < p.Struct.NumField():
		f := p.Struct.Field(p.Field)
		return fmt.Sprintf("field %s (%s) of its %s parameter", f.Name, f.Type, p.Struct)
	case p.Kind == plugin.Slice && p.SliceType != nil:
		return fmt.Sprintf("its %s parameter", p.SliceType)
	case p.Kind == plugin.Slice:
		return fmt.Sprintf("its []%s parameter", p.Type)
	}
	return fmt.Sprintf("its %s parameter", p.Type)
}

// why says what differs about t between the host (h) and the device (d). Else
// it says that its layout differs, with this process's description of it.
func why(t reflect.Type, scalar bool, h, d archFacts) string {
	if s := explain(t, h, d); s != "" {
		return s
	}
	desc := layoutText(t, thisArch())
	if scalar {
		desc = valueText(t)
	}
	return fmt.Sprintf("%s is laid out differently (here, on %s, %s)", t, thisArch().arch, desc)
}

// explain says what about t depends on the architectures h and d. That is a
// value whose size is the word's, a byte order, or an 8-byte field whose
// offset depends on alignment. It is "" if nothing in t does.
func explain(t reflect.Type, h, d archFacts) string {
	return explainIn(t, t.String(), h, d)
}

func explainIn(t reflect.Type, path string, h, d archFacts) string {
	switch t.Kind() {
	case reflect.Int, reflect.Uint, reflect.Uintptr:
		if h.word != d.word {
			return fmt.Sprintf("%s is %d bytes on the host (%s), %d on the device (%s)", where(path, t), h.word, h.arch, d.word, d.arch)
		}
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if s := explainIn(f.Type, path+"."+f.Name, h, d); s != "" {
				return s
			}
		}
		if h.align8 != d.align8 && needs8(t) {
			for i := 0; i < t.NumField(); i++ {
				if f := t.Field(i); needs8(f.Type) {
					return fmt.Sprintf("%s holds 8-byte values (field %s, %s, at offset %d on %s), which the host (%s) aligns to %d bytes and the device (%s) to %d", where(path, t), f.Name, f.Type, f.Offset, runtime.GOARCH, h.arch, h.align8, d.arch, d.align8)
				}
			}
		}
	case reflect.Array:
		if path == t.String() {
			return explainIn(t.Elem(), t.Elem().String(), h, d)
		}
		return explainIn(t.Elem(), path+"[i]", h, d)
	}
	if h.big != d.big && t.Kind() != reflect.Struct && t.Kind() != reflect.Array && t.Size() > 1 {
		return fmt.Sprintf("%s is %s on the host and %s on the device", where(path, t), order(h), order(d))
	}
	return ""
}

func order(a archFacts) string {
	if a.big {
		return "big-endian (" + a.arch + ")"
	}
	return "little-endian (" + a.arch + ")"
}

// where names a value at path of type t: "int" or "pair.B (int)".
func where(path string, t reflect.Type) string {
	if path == t.String() {
		return path
	}
	return fmt.Sprintf("%s (%s)", path, t)
}

// needs8 reports whether t holds a value aligned to 8 bytes on a 64-bit
// architecture. That is an int64, uint64, float64 or complex (or int, uint or
// uintptr), directly or in an array or struct.
func needs8(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int64, reflect.Uint64, reflect.Float64, reflect.Complex128, reflect.Int, reflect.Uint, reflect.Uintptr:
		return true
	case reflect.Array:
		return t.Len() > 0 && needs8(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if needs8(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}
