package main

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/internal/ptxgen"
	"github.com/goffload/offload/plugins/cuda"
	"github.com/goffload/offload/role"
)

// The device processes this test starts are this test binary.
func TestMain(m *testing.M) {
	role.ServeDevice()
	os.Exit(m.Run())
}

// TestCholesky factors on device processes, on host devices, mixed, and on
// the initial device alone; run checks L against plain Go every time.
func TestCholesky(t *testing.T) {
	for _, devices := range []string{"", "host:2", "host,local:2", "host"} {
		if devices != "" {
			t.Setenv("GOFFLOAD_DEVICES", devices)
		}
		if err := run(4, 16, false); err != nil {
			t.Fatalf("GOFFLOAD_DEVICES=%q: %v", devices, err)
		}
	}
	// -any: the runtime places the tasks.
	t.Setenv("GOFFLOAD_DEVICES", "host:2")
	if err := run(4, 16, true); err != nil {
		t.Fatalf("-any, GOFFLOAD_DEVICES=host:2: %v", err)
	}
	if err := run(0, 16, false); err == nil {
		t.Error("run(0 tiles) = nil; want an error")
	}
}

// TestCholeskyFakeGPU factors on fake GPUs (internal/cudadrv/cudafake),
// alone and beside the host device: the cuda kind loads cholesky.ptx (its
// .entry parameters parsed and checked against the kernels'), packs the
// arguments as the entries declare them, and the fake GPU runs each entry
// as the PTX would (fakePotrf, fakeTrsm, fakeSyrk, fakeGemm); final tiles
// go between GPUs, within one GPU shared by two devices, and between a GPU
// and the host device. run checks L against plain Go each time.
func TestCholeskyFakeGPU(t *testing.T) {
	const tiles, b = 4, 16
	all := []int{0, 1, 2, 3}
	for _, c := range []struct {
		gpus    int
		devices string
		gpuRows []int // the rows of tiles on GPU devices
	}{
		// Factor deals the heaviest row (3) to the first device, the rest to
		// the second.
		{1, "cuda,host", []int{3}},
		{1, "host,cuda", []int{0, 1, 2}},
		{2, "cuda", all},
		{1, "cuda:0,cuda:0", all},
		{1, "cuda", all},
	} {
		gpus := make([]cudafake.GPU, c.gpus)
		for i := range gpus {
			gpus[i] = cudafake.H100
		}
		drv := cudafake.New(cudafake.Config{GPUs: gpus})
		drv.SetKernel("potrf", fakePotrf)
		drv.SetKernel("trsm", fakeTrsm)
		drv.SetKernel("syrk", fakeSyrk)
		drv.SetKernel("gemm", fakeGemm)
		restore := cuda.UseDriverForTests(drv)
		t.Setenv("GOFFLOAD_DEVICES", c.devices)
		t.Setenv("OMP_TARGET_OFFLOAD", "MANDATORY")
		err := run(tiles, b, false)
		restore()
		if err != nil {
			t.Fatalf("%d fake GPUs, GOFFLOAD_DEVICES=%s: %v", c.gpus, c.devices, err)
		}
		// A task runs where the tile it writes lives, on its row's device.
		onGPU := map[int]bool{}
		for _, i := range c.gpuRows {
			onGPU[i] = true
		}
		want := map[string]int{}
		for k := range tiles {
			if onGPU[k] {
				want["potrf"]++
			}
			for i := k + 1; i < tiles; i++ {
				if onGPU[i] {
					want["trsm"]++
					want["syrk"]++
					want["gemm"] += i - k - 1
				}
			}
		}
		for _, entry := range []string{"potrf", "trsm", "syrk", "gemm"} {
			if got := drv.Launches(entry); got != want[entry] {
				t.Errorf("%d fake GPUs, GOFFLOAD_DEVICES=%s: the fake GPUs ran %s %d times, want %d", c.gpus, c.devices, entry, got, want[entry])
			}
		}
	}
}

// TestCholeskyAnyFakeGPU runs -any on a fake GPU beside the host device:
// the runtime places each task on a device that has code for it (the GPU
// runs cholesky.ptx's entries, as fakePotrf and the rest do them) and
// moves the tiles; run checks L against plain Go.
func TestCholeskyAnyFakeGPU(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	drv.SetKernel("potrf", fakePotrf)
	drv.SetKernel("trsm", fakeTrsm)
	drv.SetKernel("syrk", fakeSyrk)
	drv.SetKernel("gemm", fakeGemm)
	defer cuda.UseDriverForTests(drv)()
	t.Setenv("OMP_TARGET_OFFLOAD", "MANDATORY")
	for _, devices := range []string{"cuda", "cuda,host"} {
		t.Setenv("GOFFLOAD_DEVICES", devices)
		before := 0
		for _, e := range []string{"potrf", "trsm", "syrk", "gemm"} {
			before += drv.Launches(e)
		}
		if err := run(4, 16, true); err != nil {
			t.Fatalf("-any, GOFFLOAD_DEVICES=%s: %v", devices, err)
		}
		gpu := -before
		for _, e := range []string{"potrf", "trsm", "syrk", "gemm"} {
			gpu += drv.Launches(e)
		}
		// 4 potrf, 6 trsm, 6 syrk, 4 gemm: all on the GPU when it is the
		// only device, some of them at most beside the host device.
		if devices == "cuda" && gpu != 20 || gpu > 20 {
			t.Errorf("-any, GOFFLOAD_DEVICES=%s: the fake GPU ran %d kernels of the 20", devices, gpu)
		}
	}
}

// tile returns the b×b float64s at parameter p of l, a device address.
func tile(l *cudafake.Launch, p int, b int64) ([]float64, error) {
	return cudafake.Slice[float64](l, p, b*b)
}

// threads checks that the launch has at least n threads.
func threads(l *cudafake.Launch, n int64) error {
	if l.Threads() < n {
		return fmt.Errorf("%d threads for %d", l.Threads(), n)
	}
	return nil
}

// fakePotrf is cholesky.ptx's potrf (a, b) on a fake GPU: the first
// block, its threads in turn between the barriers (each writes its own
// rows of column j and reads only columns before j and row j).
func fakePotrf(l *cudafake.Launch) error {
	b := l.Int64(1)
	a, err := tile(l, 0, b)
	if err != nil {
		return err
	}
	nt := int64(l.Block[0])
	for j := int64(0); j < b; j++ {
		s := a[j*b+j] // thread 0
		for k := int64(0); k < j; k++ {
			s -= a[j*b+k] * a[j*b+k]
		}
		a[j*b+j] = math.Sqrt(s)
		// __syncthreads
		for t := range nt {
			d := a[j*b+j]
			for i := j + 1 + t; i < b; i += nt {
				x := a[i*b+j]
				for k := int64(0); k < j; k++ {
					x -= a[i*b+k] * a[j*b+k]
				}
				a[i*b+j] = x / d
			}
		}
		// __syncthreads
	}
	return nil
}

// fakeTrsm is cholesky.ptx's trsm (l, a, b): thread r solves row r.
func fakeTrsm(l *cudafake.Launch) error {
	b := l.Int64(2)
	if err := threads(l, b); err != nil {
		return err
	}
	lt, err := tile(l, 0, b)
	if err != nil {
		return err
	}
	a, err := tile(l, 1, b)
	if err != nil {
		return err
	}
	for r := range l.Threads() {
		if r < b {
			x := a[r*b:]
			for j := int64(0); j < b; j++ {
				t := x[j]
				for k := int64(0); k < j; k++ {
					t -= x[k] * lt[j*b+k]
				}
				x[j] = t / lt[j*b+j]
			}
		}
	}
	return nil
}

// fakeSyrk is cholesky.ptx's syrk (a, c, b): thread e updates element e of
// c if it is on or below the diagonal.
func fakeSyrk(l *cudafake.Launch) error {
	b := l.Int64(2)
	if err := threads(l, b*b); err != nil {
		return err
	}
	a, err := tile(l, 0, b)
	if err != nil {
		return err
	}
	c, err := tile(l, 1, b)
	if err != nil {
		return err
	}
	for e := range l.Threads() {
		if e < b*b {
			i, j := e/b, e%b
			if j <= i {
				t := 0.0
				for k := int64(0); k < b; k++ {
					t += a[i*b+k] * a[j*b+k]
				}
				c[i*b+j] -= t
			}
		}
	}
	return nil
}

// fakeGemm is cholesky.ptx's gemm (a, bt, c, b): thread e updates element
// e of c.
func fakeGemm(l *cudafake.Launch) error {
	b := l.Int64(3)
	if err := threads(l, b*b); err != nil {
		return err
	}
	a, err := tile(l, 0, b)
	if err != nil {
		return err
	}
	bt, err := tile(l, 1, b)
	if err != nil {
		return err
	}
	c, err := tile(l, 2, b)
	if err != nil {
		return err
	}
	for e := range l.Threads() {
		if e < b*b {
			i, j := e/b, e%b
			t := 0.0
			for k := int64(0); k < b; k++ {
				t += a[i*b+k] * bt[j*b+k]
			}
			c[i*b+j] -= t
		}
	}
	return nil
}

// TestCholeskyPTXGenerated: examples/apps/cholesky's cholesky.ptx is what
// go generate makes of cholesky.cu, where clang with the NVPTX target is
// installed.
func TestCholeskyPTXGenerated(t *testing.T) {
	ptxgen.UpToDate(t, "../apps/cholesky/cholesky.go")
}
