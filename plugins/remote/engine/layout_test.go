package engine

import (
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"strings"
	"testing"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
)

// The layout check at hello (layout.go), as plain state: a peer's hello is
// made from layout texts written out by hand for another architecture, the
// way its process would describe its types, and checkImageWith must name
// the kernel, the parameter and the type that differ.

type archPair struct {
	A int32
	B int64
}

type archAttach struct {
	N  int32
	Xs []float32
}

var (
	kArchFloats, _ = entries.RegisterKernel("remote.arch.floats", func(a float32, x []float32, y []float64) {})
	kArchInts, _   = entries.RegisterKernel("remote.arch.ints", func(n int, x []int) {})
	kArchPairs, _  = entries.RegisterKernel("remote.arch.pairs", func(p []archPair) {})
	kArchAttach, _ = entries.RegisterKernel("remote.arch.attach", func(a archAttach, b []byte) {})
)

// archImage is an image of the given kernels.
func archImage(ks ...*entries.Kernel) *plugin.Image {
	img := &plugin.Image{}
	for _, k := range ks {
		img.Kernels = append(img.Kernels, k)
	}
	img.Digest = entries.Digest(img.Kernels)
	return img
}

// peerHello is the hello of a peer with arch, whose process describes the
// memory of its types as texts says and their values as scalars as vtexts
// says (a type they leave out: as this process does), and the elements of
// its variables as gtexts says.
func peerHello(t *testing.T, img *plugin.Image, arch string, texts, vtexts map[reflect.Type]string, gs []*entries.Global, gtexts map[string]string) hello {
	t.Helper()
	sum := func(s string) uint32 {
		h := fnv.New32a()
		h.Write([]byte(s))
		return h.Sum32()
	}
	l := layoutOf(img.Kernels, nil)
	var sums, gsums []uint32
	for i, typ := range l.types {
		s, ok := texts[typ]
		if !ok {
			s = layoutText(typ, thisArch())
		}
		if l.scalar[i] {
			if s, ok = vtexts[typ]; !ok {
				s = valueText(typ)
			}
		}
		sums = append(sums, sum(s))
	}
	for _, g := range gs {
		s, ok := gtexts[g.Name]
		if !ok {
			s = layoutText(g.Elem, thisArch())
		}
		gsums = append(gsums, sum(s))
	}
	text := fmt.Sprintf("%s %d %s %d 0 arch=%s kt=%s gt=%s", proto.Magic, proto.Version, img.Digest, len(img.Kernels), arch, sumsText(sums), sumsText(gsums))
	h, err := parseHello(text)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func need64LE(t *testing.T) {
	t.Helper()
	if a := thisArch(); a.word != 8 || a.align8 != 8 || a.big {
		t.Skipf("the hand-written layouts are those of a 64-bit little-endian host, not %s", a)
	}
}

// TestLayoutText: what a process hashes for a type (here, on a 64-bit
// little-endian architecture): sizes, offsets and byte order.
func TestLayoutText(t *testing.T) {
	need64LE(t)
	for typ, want := range map[reflect.Type]string{
		reflect.TypeFor[int]():         "i8<",
		reflect.TypeFor[bool]():        "b1",
		reflect.TypeFor[uint8]():       "u1",
		reflect.TypeFor[complex64]():   "c8<",
		reflect.TypeFor[[3]int16]():    "[3]i2<",
		reflect.TypeFor[archPair]():    "{16 i4<@0 i8<@8}",
		reflect.TypeFor[[2]archPair](): "[2]{16 i4<@0 i8<@8}",
	} {
		if got := layoutText(typ, thisArch()); got != want {
			t.Errorf("%s: %q, want %q", typ, got, want)
		}
	}
	// A scalar's values, as they cross field by field.
	if got := valueText(reflect.TypeFor[[2]archPair]()); got != "[2]{i4 i8}" {
		t.Errorf("values of [2]archPair: %q", got)
	}
}

// TestLayoutSameArch: a peer of the same layouts passes, whatever its
// GOARCH (arm64, riscv64 and ppc64le lay out memory as amd64 does), and so
// does a peer whose hello says no architecture (a build from before).
func TestLayoutSameArch(t *testing.T) {
	need64LE(t)
	img := archImage(kArchFloats, kArchInts, kArchPairs, kArchAttach)
	gs := []*entries.Global{{Index: 0, Name: "table", Elem: reflect.TypeFor[archPair](), Len: 4}}
	for _, arch := range []string{"amd64/8/8/le", "arm64/8/8/le", "riscv64/8/8/le", "ppc64le/8/8/le"} {
		for _, self := range []string{"host", "device"} {
			if err := checkImageWith(peerHello(t, img, arch, nil, nil, gs, nil), img, gs, self); err != nil {
				t.Errorf("%s peer of a %s: %v", arch, self, err)
			}
		}
	}
	old, err := parseHello(fmt.Sprintf("%s %d %s %d 0", proto.Magic, proto.Version, img.Digest, len(img.Kernels)))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkImageWith(old, img, gs, "host"); err != nil {
		t.Errorf("a hello without an architecture: %v", err)
	}
	// This process's own hello, as the other side reads it.
	own, err := parseHello(helloText(entries.Current()))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkImage(own, entries.Current(), "device"); err != nil {
		t.Errorf("this process's own hello: %v", err)
	}
}

// Test32Bit: a 386 device (int 4 bytes, 8-byte values aligned to 4) is
// refused, naming each kernel and parameter whose type differs and why.
func Test32Bit(t *testing.T) {
	need64LE(t)
	img := archImage(kArchFloats, kArchInts, kArchPairs, kArchAttach)
	on386 := map[reflect.Type]string{
		reflect.TypeFor[int]():      "i4<",
		reflect.TypeFor[archPair](): "{12 i4<@0 i8<@4}",
	}
	val386 := map[reflect.Type]string{reflect.TypeFor[int](): "i4"}
	// Checked on the host: the peer is the 386 device.
	{
		self := "host"
		err := checkImageWith(peerHello(t, img, "386/4/4/le", on386, val386, nil, nil), img, nil, self)
		msg := fmt.Sprint(err)
		for _, want := range []string{
			"the host (amd64: 64-bit, little-endian) and the device (386: 32-bit, little-endian) lay out memory differently",
			`kernel "remote.arch.ints", its int parameter: int is 8 bytes on the host (amd64), 4 on the device (386)`,
			`kernel "remote.arch.ints", its []int parameter: int is 8 bytes on the host (amd64), 4 on the device (386)`,
			`kernel "remote.arch.pairs", its []engine.archPair parameter: engine.archPair holds 8-byte values (field B, int64, at offset 8 on amd64), which the host (amd64) aligns to 8 bytes and the device (386) to 4`,
		} {
			if !errors.Is(err, ErrMismatch) || !strings.Contains(msg, want) {
				t.Errorf("checked on the %s: %v\nwant ErrMismatch saying %q", self, err, want)
			}
		}
		if strings.Contains(msg, "float") {
			t.Errorf("checked on the %s: %v names the float types, which 386 lays out alike", self, err)
		}
	}
	// Checked on the device: the peer is a 386 host.
	err := checkImageWith(peerHello(t, img, "386/4/4/le", on386, val386, nil, nil), img, nil, "device")
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), `kernel "remote.arch.ints", its int parameter: int is 4 bytes on the host (386), 8 on the device (amd64)`) {
		t.Errorf("checked on the device: %v", err)
	}
	// Kernels of float32 and float64 only lay out alike on 386: the word
	// size refuses it still (addresses and lengths).
	floats := archImage(kArchFloats)
	err = checkImageWith(peerHello(t, floats, "386/4/4/le", nil, nil, nil, nil), floats, nil, "host")
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "the host is amd64: 64-bit, little-endian and the device 386: 32-bit, little-endian") || !strings.Contains(err.Error(), "same word size") {
		t.Errorf("float kernels on 386: %v", err)
	}
}

// TestBigEndian: an s390x device is refused, naming the first kernels whose
// types hold values of more than one byte, and how many more there are.
func TestBigEndian(t *testing.T) {
	need64LE(t)
	img := archImage(kArchFloats, kArchInts, kArchPairs, kArchAttach)
	be := map[reflect.Type]string{}
	for _, typ := range layoutOf(img.Kernels, nil).types {
		be[typ] = strings.ReplaceAll(layoutText(typ, thisArch()), "<", ">")
	}
	gs := []*entries.Global{{Index: 0, Name: "flags", Elem: reflect.TypeFor[uint8](), Len: 8}, {Index: 1, Name: "table", Elem: reflect.TypeFor[[2]float64](), Len: 4, Link: true}}
	gbe := map[string]string{"table": "[2]f8>"}
	err := checkImageWith(peerHello(t, img, "s390x/8/8/be", be, nil, gs, gbe), img, gs, "host")
	msg := fmt.Sprint(err)
	for _, want := range []string{
		"the device (s390x: 64-bit, big-endian)",
		`kernel "remote.arch.floats", its []float32 parameter: float32 is little-endian (amd64) on the host and big-endian (s390x) on the device`,
		`kernel "remote.arch.floats", its []float64 parameter: float64 is little-endian`,
		`kernel "remote.arch.ints", its []int parameter`,
		"; and 2 more", // []archPair and the variable "table"; bytes are alike
	} {
		if !errors.Is(err, ErrMismatch) || !strings.Contains(msg, want) {
			t.Errorf("%v\nwant ErrMismatch saying %q", err, want)
		}
	}
	// Scalars cross field by field, little-endian on the wire.
	if strings.Contains(msg, "its float32 parameter") || strings.Contains(msg, "its int parameter") {
		t.Errorf("%v names a scalar parameter, whose values cross alike", err)
	}
	// The variables are named too, once the kernels leave room.
	floats := archImage(kArchAttach)
	be = map[reflect.Type]string{reflect.TypeFor[int32](): "i4>", reflect.TypeFor[float32](): "f4>"}
	err = checkImageWith(peerHello(t, floats, "s390x/8/8/be", be, nil, gs, gbe), floats, gs, "host")
	msg = fmt.Sprint(err)
	for _, want := range []string{
		`kernel "remote.arch.attach", field Xs ([]float32) of its engine.archAttach parameter: float32 is little-endian`,
		`link variable "table" ([][2]float64, 4 elements): float64 is little-endian (amd64) on the host and big-endian (s390x) on the device`,
	} {
		if !errors.Is(err, ErrMismatch) || !strings.Contains(msg, want) {
			t.Errorf("%v\nwant ErrMismatch saying %q", err, want)
		}
	}
	if strings.Contains(msg, `"flags"`) || strings.Contains(msg, "field N") {
		t.Errorf("%v names a variable of bytes or a scalar field, which cross alike", err)
	}
}

// TestLayoutOtherCode: a hello whose list of types is not as long as this
// table's is from other code, and is refused as such.
func TestLayoutOtherCode(t *testing.T) {
	img := archImage(kArchFloats)
	text := fmt.Sprintf("%s %d %s %d 0 arch=arm64/8/8/le kt=00000001 gt=", proto.Magic, proto.Version, img.Digest, len(img.Kernels))
	h, err := parseHello(text)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkImageWith(h, img, nil, "host"); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "different code") {
		t.Errorf("got %v, want ErrMismatch saying different code", err)
	}
}

// TestLayoutLongList: a table of more than maxSums types sends one hash of
// all, which passes where the layouts agree and names the types that
// depend on the architectures where they do not.
func TestLayoutLongList(t *testing.T) {
	sums := make([]uint32, maxSums+1)
	for i := range sums {
		sums[i] = uint32(i * 7)
	}
	l, ok := parseSums(sumsText(sums))
	if !ok || !l.one {
		t.Fatalf("%d sums: %+v %v, want one hash of all", len(sums), l, ok)
	}
	if idx, ok := l.differ(sums, func(int) bool { return true }); !ok || idx != nil {
		t.Errorf("the same sums differ at %v", idx)
	}
	other := append([]uint32(nil), sums...)
	other[5]++
	if idx, ok := l.differ(other, func(i int) bool { return i == 3 }); !ok || len(idx) != 1 || idx[0] != 3 {
		t.Errorf("other sums: %v %v, want [3]", idx, ok)
	}
	short, ok := parseSums(sumsText(sums[:3]))
	if !ok || short.one || len(short.sums) != 3 || short.sums[2] != 14 {
		t.Errorf("3 sums: %+v %v", short, ok)
	}
}

// TestHelloFieldsMalformed: a hello whose architecture or layout fields are
// malformed is a frame error, as any other malformed hello.
func TestHelloFieldsMalformed(t *testing.T) {
	base := proto.Magic + " 1 0123456789abcdef 3 500000 "
	for _, fields := range []string{
		"arch=amd64/8/8/le",             // no layouts
		"kt=00000001",                   // layouts without an architecture
		"arch=amd64/8/8 kt=",            // three facts
		"arch=AMD64/8/8/le kt=",         // not a GOARCH
		"arch=amd64/16/8/le kt=",        // a word of 16 bytes
		"arch=amd64/8/8/xe kt=",         // no such byte order
		"arch=amd64/8/8/le kt=abc",      // not whole hashes
		"arch=amd64/8/8/le kt=zzzzzzzz", // not hex
		"arch=amd64/8/8/le kt=#00",      // a short hash of all
		"arch=amd64/8/8/le kt= gt=x",    // bad variables
		"arch=amd64/8/8/le kt= kt=",     // a field twice
		"arch=amd64/8/8/le kt= what",    // not key=value
		"arch=amd64/8/8/le kt= =1",      // no key
	} {
		if _, err := parseHello(base + fields); !errors.Is(err, proto.ErrFrame) {
			t.Errorf("%q: got %v, want ErrFrame", fields, err)
		}
	}
	h, err := parseHello(base + "arch=arm64/8/8/le kt= gt= later=whatever")
	if err != nil || !h.hasArch || h.arch.arch != "arm64" || !h.hasGlobals {
		t.Errorf("a hello with a key from later: %+v, %v", h, err)
	}
}

// TestLayoutPrefix: a host may register kernels its device processes have
// not. The side with the longer table checks the layouts of the kernels
// both have, and the other leaves the check to it.
func TestLayoutPrefix(t *testing.T) {
	need64LE(t)
	long := archImage(kArchFloats, kArchPairs, kArchInts)
	short := archImage(kArchFloats, kArchPairs)
	on386 := map[reflect.Type]string{reflect.TypeFor[archPair](): "{12 i4<@0 i8<@4}"}
	err := checkImageWith(peerHello(t, short, "386/4/4/le", on386, nil, nil, nil), long, nil, "host")
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), `kernel "remote.arch.pairs"`) || strings.Contains(err.Error(), "remote.arch.ints") {
		t.Errorf("the longer table's side: %v; want ErrMismatch naming remote.arch.pairs only", err)
	}
	if err := checkImageWith(peerHello(t, long, "386/4/4/le", on386, nil, nil, nil), short, nil, "device"); err != nil {
		t.Errorf("the shorter table's side: %v; want nil (the other side checks)", err)
	}
}
