package cuda_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/cuda"
)

// Typed kernels with PTX (testPTX's addone) and one without.
var (
	addOneK = offload.MustKernel2("cudatest.rt.addone", func(ctx offload.Ctx, x offload.InOut[int64], n int) {
		for i := range n {
			x[i]++
		}
	}).PTX([]byte(testPTX), "addone")
	goOnlyK = offload.MustKernel1("cudatest.rt.goonly", func(ctx offload.Ctx, x offload.InOut[int64]) {})
)

// TestRuntimeFakeGPUs starts the runtime with GOFFLOAD_DEVICES=cuda,host
// over two fake GPUs: typed launches, a data region, tasks depending on
// each other across the two GPUs (one GPU's stream waits on the other's
// event) and the host device (which waits on the host), a copy between
// the GPUs' memories, and a kernel without PTX refused on a GPU.
func TestRuntimeFakeGPUs(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100, cudafake.H100}})
	drv.SetKernel("addone", addOne)
	defer cuda.UseDriverForTests(drv)()
	var info bytes.Buffer
	if err := offload.Start(offload.WithDevices("cuda,host"), offload.WithOffload("MANDATORY"),
		offload.WithInfo("offload", &info)); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop()
	if n := offload.NumDevices(); n != 3 {
		t.Fatalf("%d devices, want 3 (two GPUs and the host)", n)
	}
	for i, kind := range []string{"cuda", "cuda", "host"} {
		in, err := offload.On(i).Info()
		if err != nil || in.Kind != kind {
			t.Fatalf("device %d: %+v, %v; want a %s device", i, in, err, kind)
		}
	}
	if in, _ := offload.On(0).Info(); in.Arch != "sm_90" || in.Cores != 132 || in.Spec != "cuda" {
		t.Errorf("GPU 0: %+v", in)
	}

	const n = 1000
	x := make([]int64, n)
	for i := range x {
		x[i] = int64(i)
	}
	if err := addOneK.Run(offload.On(0), x, n); err != nil {
		t.Fatal(err)
	}
	check := func(what string, add int64) {
		t.Helper()
		for i, v := range x {
			if v != int64(i)+add {
				t.Fatalf("%s: x[%d] = %d, want %d", what, i, v, int64(i)+add)
			}
		}
	}
	check("one launch", 1)

	// A data region: ten launches, one copy each way.
	gpu1 := offload.On(1)
	if err := gpu1.Data(func() error {
		for range 10 {
			if err := addOneK.Run(gpu1, x, n); err != nil {
				return err
			}
		}
		return nil
	}, offload.ToFrom(x)); err != nil {
		t.Fatal(err)
	}
	check("a data region", 11)

	// A chain of tasks across the GPUs and the host device.
	var tasks []*offload.Task
	for i := range 9 {
		tasks = append(tasks, addOneK.Nowait(offload.On(i%3).Nowait(offload.DependInOut(x)), x, n))
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks {
		if err := tk.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	check("a chain of tasks over both GPUs and the host", 20)

	// A copy between the GPUs' memories (cuMemcpyPeerAsync).
	y := make([]int64, n)
	gpu0 := offload.On(0)
	if err := gpu0.EnterData(offload.To(x)); err != nil {
		t.Fatal(err)
	}
	if err := gpu1.EnterData(offload.Alloc(y)); err != nil {
		t.Fatal(err)
	}
	if err := offload.Copy(gpu1, y, gpu0, x); err != nil {
		t.Fatal(err)
	}
	if err := gpu1.ExitData(offload.From(y)); err != nil {
		t.Fatal(err)
	}
	if err := gpu0.ExitData(offload.Release(x)); err != nil {
		t.Fatal(err)
	}
	for i := range y {
		if y[i] != x[i] {
			t.Fatalf("copied between GPUs: y[%d] = %d, want %d", i, y[i], x[i])
		}
	}
	if drv.Calls("cuMemcpyPeerAsync") == 0 {
		t.Errorf("the copy between GPUs did not use cuMemcpyPeerAsync")
	}
	// A dependent enqueued while its predecessor on the other GPU still
	// runs waits for it on its own stream (cuStreamWaitEvent), not on the
	// host. The predecessor is held in its kernel until the wait is seen,
	// so that it cannot finish first (a chain of quick tasks may see every
	// predecessor done already: CI did). The two order on a depend object
	// of their own: on x itself, the dependent would need x's data back in
	// host memory first, and wait on the host.
	gate := make(chan struct{})
	drv.SetKernel("addone", func(l *cudafake.Launch) error { <-gate; return addOne(l) })
	waits := drv.Calls("cuStreamWaitEvent")
	// Their data stays on the GPUs meanwhile: a task that copied back
	// would hold its queue until the copy, and issue its event only then.
	order := new(int)
	xa, xb := make([]int64, n), make([]int64, n)
	if err := offload.On(0).EnterData(offload.To(xa)); err != nil {
		t.Fatal(err)
	}
	if err := gpu1.EnterData(offload.To(xb)); err != nil {
		t.Fatal(err)
	}
	held := addOneK.Nowait(offload.On(0).Nowait(offload.DependInOut(order)), xa, n)
	dependent := addOneK.Nowait(offload.On(1).Nowait(offload.DependInOut(order)), xb, n)
	deadline := time.Now().Add(20 * time.Second)
	for drv.Calls("cuStreamWaitEvent") == waits && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polls the driver's count: the event it waits for
	}
	saw := drv.Calls("cuStreamWaitEvent") > waits

	close(gate)
	for _, tk := range []*offload.Task{held, dependent} {
		if err := tk.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if !saw {
		t.Errorf("a dependent on the other GPU's running task did not wait on its event on the GPU (cuStreamWaitEvent)")
	}
	if err := offload.On(0).ExitData(offload.From(xa)); err != nil {
		t.Fatal(err)
	}
	if err := gpu1.ExitData(offload.From(xb)); err != nil {
		t.Fatal(err)
	}
	if xa[n-1] != 1 || xb[n-1] != 1 {
		t.Errorf("the two dependent tasks wrote %d and %d, want 1 and 1", xa[n-1], xb[n-1])
	}

	// A kernel without PTX is refused on a GPU, naming it.
	err := goOnlyK.Run(gpu0, x)
	if err == nil || !strings.Contains(err.Error(), `kernel "cudatest.rt.goonly" has no PTX`) || !errors.Is(err, plugin.ErrUnsupported) {
		t.Errorf("a kernel without PTX on a GPU: %v", err)
	}
	if err := goOnlyK.Run(offload.On(2), x); err != nil {
		t.Errorf("the same kernel on the host device: %v", err)
	}
}

// TestDiscoveryGPUsFirst: with GOFFLOAD_DEVICES unset, the GPUs are found
// and numbered before the host device, as libomptarget orders them.
func TestDiscoveryGPUsFirst(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100, cudafake.H100}})
	defer cuda.UseDriverForTests(drv)()
	t.Setenv("GOFFLOAD_DEVICES", "")
	os.Unsetenv("GOFFLOAD_DEVICES")
	if err := offload.Start(); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop()
	var kinds []string
	for i := range offload.NumDevices() {
		in, err := offload.On(i).Info()
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, in.Kind)
	}
	if strings.Join(kinds, ",") != "cuda,cuda,host" {
		t.Errorf("discovered %v, want the two GPUs, then the host device", kinds)
	}
}
