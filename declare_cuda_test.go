package offload_test

import (
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/plugins/cuda"
)

// addOnePTX is a GPU kernel that adds 1 to the n int64s at x.
const addOnePTX = `
.version 6.0
.target sm_50
.address_size 64

.visible .entry addone(
	.param .u64 .ptr .align 1 p_x,
	.param .s64 p_n
)
{
	ret;
}
`

// declGPUAdd is addone with a Go body for CPU devices.
var declGPUAdd = offload.MustKernel2("declare.gpu_addone", func(ctx offload.Ctx, x offload.InOut[int64], n int) {
	for i := range n {
		x[i]++
	}
}).PTX([]byte(addOnePTX), "addone")

// TestDeclareToCUDA: a program with declare target variables keeps its
// GPUs. On a (fake) GPU a "to" variable is present memory holding the
// host's value from Start on; a PTX kernel given g.Host() as an argument
// works on the GPU's copy, which Update copies back; the host device keeps
// a copy of its own.
func TestDeclareToCUDA(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	drv.SetKernel("addone", func(l *cudafake.Launch) error {
		n := l.Int64(1)
		x, err := cudafake.Slice[int64](l, 0, n)
		if err != nil {
			return err
		}
		for i := range x {
			x[i]++
		}
		return nil
	})
	defer cuda.UseDriverForTests(drv)()
	c := declCounter.Host()
	defer func(v int64) { c[0] = v }(c[0])
	c[0] = 500
	if err := offload.Start(offload.WithDevices("cuda,host"), offload.WithOffload("MANDATORY")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop()
	gpu, host := offload.On(0), offload.On(1)
	if in, err := gpu.Info(); err != nil || in.Kind != "cuda" {
		t.Fatalf("device 0: %+v, %v; want the GPU", in, err)
	}
	check := func(what string, dev offload.Device, want int64) {
		t.Helper()
		c[0] = -1
		if err := dev.Update(offload.From(c)); err != nil {
			t.Fatalf("%s: declUpdate from: %v", what, err)
		}
		if c[0] != want {
			t.Fatalf("%s: counter %d, want %d", what, c[0], want)
		}
	}
	check("GPU after Start", gpu, 500)
	for i := range 3 {
		if err := declGPUAdd.Run(gpu, c, 1); err != nil {
			t.Fatalf("launch %d: %v", i, err)
		}
	}
	check("GPU after three launches", gpu, 503)
	if err := declGPUAdd.Nowait(gpu.Nowait(offload.DependInOut(c)), c, 1).Wait(); err != nil {
		t.Fatal(err)
	}
	check("GPU after a task", gpu, 504)
	check("host device", host, 500)
	if got := drv.Launches("addone"); got != 4 {
		t.Errorf("%d launches of addone on the GPU, want 4", got)
	}
}
