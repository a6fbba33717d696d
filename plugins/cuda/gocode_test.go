package cuda_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/plugin"
)

// genPTX declares entries as goffload-gen's PTX takes them: the Go
// parameters (x, i), then the hidden ones (x's length, the device number,
// the fault record); short lacks the hidden ones.
const genPTX = `
.version 4.0
.target sm_50
.address_size 64

.visible .entry gen_addat(
	.param .u64 p_x,
	.param .u64 p_i,
	.param .u64 p_len_x,
	.param .u64 p_dev,
	.param .u64 p_f
)
{
	ret;
}

.visible .entry short(
	.param .u64 p_x,
	.param .u64 p_i
)
{
	ret;
}
`

// genAddAt is gen_addat on a fake GPU, as generated code with Go's
// checks does it: x[i]++, where an i outside x writes the fault record
// (site 1: the index, the length, not in a chunk) and returns. It checks
// the hidden parameters: the length is x's, the device number 3.
func genAddAt(l *cudafake.Launch) error {
	n, i, dev := l.Int64(2), l.Int64(1), l.Int64(3)
	if dev != 3 {
		return fmt.Errorf("device number %d, want 3", dev)
	}
	rec, err := cudafake.Slice[int64](l, 4, 4)
	if err != nil {
		return err
	}
	if uint64(i) >= uint64(n) {
		if rec[0] == 0 {
			rec[0], rec[1], rec[2], rec[3] = 1, i, n, 0
		}
		return nil
	}
	x, err := cudafake.Slice[int64](l, 0, n)
	if err != nil {
		return err
	}
	x[i]++
	return nil
}

// TestGeneratedPTX: the cuda kind launches generated PTX with the hidden
// parameters after the kernel's (the slice's length, the device number,
// a fault record), and a failed check — written to the record by the
// kernel — fails the launch with ErrKernelFailed naming the kernel, the
// Go file and line, the index and the length, as the Go body's panic
// would; the record is zeroed, so the next launch runs. An entry without
// the hidden parameters is refused, naming them.
func TestGeneratedPTX(t *testing.T) {
	code := func(entry string) plugin.DeviceCode {
		return plugin.DeviceCode{Format: "ptx", Image: []byte(genPTX), Entry: entry, Generated: true, Sites: []string{"gen.go:12: index"}}
	}
	img := imageOf(
		testKernel{"cudatest.gen.addat", func(x []int64, i int) {}, nil, "", nil},
		testKernel{"cudatest.gen.short", func(x []int64, i int) {}, nil, "", nil},
	)
	img.Kernels[0].(*ptxKernel).code = code("gen_addat")
	img.Kernels[1].(*ptxKernel).code = code("short")
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	drv.SetKernel("gen_addat", genAddAt)
	d := loadImageAs(t, drv, img, 3)
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const n = 4
	x := make([]int64, n)
	bytes := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 8*n)
	p, err := d.Alloc(8 * n)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Submit(p, bytes); err != nil {
		t.Fatal(err)
	}
	addAt := func(i int) error {
		if err := q.Launch(img.Kernels[0], []plugin.Arg{{Ptr: p, Len: n}, {Scalar: i}}); err != nil {
			return err
		}
		return q.Synchronize()
	}
	if err := addAt(1); err != nil {
		t.Fatal(err)
	}
	err = addAt(n)
	var kp *plugin.KernelPanic
	if !errors.Is(err, plugin.ErrKernelFailed) || !errors.As(err, &kp) {
		t.Fatalf("x[%d]: %v; want a KernelPanic", n, err)
	}
	const want = `kernel "cudatest.gen.addat" panicked at gen.go:12: runtime error: index out of range [4] with length 4`
	if kp.At != "gen.go:12" || !strings.Contains(err.Error(), want) {
		t.Errorf("x[%d]: %v (at %q); want %q", n, err, kp.At, want)
	}
	if err := addAt(3); err != nil {
		t.Fatalf("after the fault: %v", err)
	}
	if err := q.Retrieve(bytes, p); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if x[1] != 1 || x[3] != 1 || x[0] != 0 || x[2] != 0 {
		t.Errorf("x = %v, want [0 1 0 1]", x)
	}
	if n := drv.Launches("gen_addat"); n != 3 {
		t.Errorf("%d launches, want 3", n)
	}

	err = q.Launch(img.Kernels[1], []plugin.Arg{{Ptr: p, Len: n}, {Scalar: 0}})
	const short = `kernel "cudatest.gen.short": generated PTX entry short has 2 parameters, the Go kernel 2 parameters and 3 hidden ones`
	if !errors.Is(err, plugin.ErrBadKernel) || !strings.Contains(err.Error(), short) {
		t.Errorf("an entry without the hidden parameters: %v; want %q", err, short)
	}
}
