package offload_test

import (
	"errors"
	"fmt"
	"sync"

	"github.com/goffload/offload"
	"github.com/goffload/offload/tool"
)

// Axpy is registered at package init, as every kernel is.
var Axpy = offload.MustKernel("example.axpy", func(ctx offload.Ctx, a float64, x, y []float64) {
	ctx.For(len(y), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] += a * x[i]
		}
	})
})

// A target region: x is copied to the device, y to the device and back.
func ExampleDevice_Run() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	x := []float64{1, 2, 3, 4}
	y := []float64{10, 20, 30, 40}
	err := offload.On(0).Run(Axpy, 2.0, offload.To(x).Named("x"), offload.ToFrom(y).Named("y"))
	fmt.Println(y, err)
	// Output: [12 24 36 48] <nil>
}

// A structured data region keeps x on the device across two kernels; only
// the end of the region copies it back.
func ExampleDevice_Data() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	d := offload.On(0)
	x := []float64{1, 1, 1}
	y := []float64{0, 0, 0}
	err := d.Data(func() error {
		if err := d.Run(Axpy, 1.0, x, y); err != nil { // x and y are present: no copies
			return err
		}
		if err := d.Run(Axpy, 2.0, x, y); err != nil {
			return err
		}
		fmt.Println("inside the region, host y is still", y)
		return nil
	}, offload.To(x), offload.ToFrom(y))
	fmt.Println("after the region:", y, err)
	// Output:
	// inside the region, host y is still [0 0 0]
	// after the region: [3 3 3] <nil>
}

// Unstructured mapping with enter/exit data and target update.
func ExampleDevice_EnterData() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	d := offload.On(0)
	x := []float64{1, 2}
	y := []float64{0, 0}
	_ = d.EnterData(offload.To(x), offload.Alloc(y))
	_ = d.Run(Axpy, 1.0, x, offload.To(y)) // y is present: To does not copy again
	fmt.Println("present:", d.IsPresent(y), "host y:", y)
	_ = d.Update(offload.From(y))
	fmt.Println("after update from:", y)
	_ = d.ExitData(offload.Release(x), offload.Delete(y))
	fmt.Println("present:", d.IsPresent(y))
	// Output:
	// present: true host y: [0 0]
	// after update from: [1 2]
	// present: false
}

// The present modifier turns a missing mapping into an error that names the
// buffer.
func ExampleMap_Present() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	x := make([]float64, 8)
	err := offload.Update(offload.To(x).Present().Named("x"))
	var me *offload.MapError
	if errors.As(err, &me) {
		fmt.Println(me.Name, me.Size, errors.Is(err, offload.ErrNotPresent))
	}
	// Output: x 64 true
}

// NewKernel refuses a function that cannot run on a device, naming the
// parameter.
func ExampleNewKernel() {
	_, err := offload.NewKernel("example.bad", func(name string, x []float64) {})
	fmt.Println(err)
	// Output: invalid kernel: kernel "example.bad": parameter 0 (string): string (kind string) cannot be copied to a device (want bool, numbers, or arrays/structs of them)
}

// Device memory routines: allocate, copy in, run a kernel on the memory
// directly, copy out.
func ExampleMemcpy() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	d := offload.On(0)
	x := []float64{1, 2, 3}
	y := []float64{5, 5, 5}
	px, _ := d.Alloc(24)
	py, _ := d.Alloc(24)
	defer offload.Free(px)
	defer offload.Free(py)
	_ = offload.Memcpy(px, offload.HostPtr(x), 24)
	_ = offload.Memcpy(py, offload.HostPtr(y), 24)
	_ = d.Run(Axpy, 10.0, px, py)
	_ = offload.Memcpy(offload.HostPtr(y), py, 24)
	fmt.Println(y)
	// Output: [15 25 35]
}

// kernelLog is a Tool that also takes device-side times (a DeviceOpTool):
// it keeps the kernels the devices ran and the bytes they copied.
type kernelLog struct {
	mu      sync.Mutex
	kernels []string
	copied  int64
}

func (l *kernelLog) TargetBegin(tool.TargetEvent)  {}
func (l *kernelLog) TargetEnd(tool.TargetEvent)    {}
func (l *kernelLog) DataOp(tool.DataEvent)         {}
func (l *kernelLog) KernelLaunch(tool.KernelEvent) {}
func (l *kernelLog) Wait(tool.WaitEvent)           {}
func (l *kernelLog) DeviceOp(e tool.DeviceOpEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e.Kind {
	case tool.OpLaunch:
		l.kernels = append(l.kernels, fmt.Sprintf("%s on device %d, task %d", e.Kernel, e.Device, e.Task))
	case tool.OpSubmit, tool.OpRetrieve:
		l.copied += e.Bytes
	}
}

// A Tool that implements DeviceOpTool gets each queue operation as the
// device ran it: here, the kernel and the bytes copied of a target region
// (x and y in, y out: 3×32 bytes). Time and End are the device's start and
// end on the host's clock.
func ExampleDeviceOpTool() {
	log := &kernelLog{}
	if err := offload.Start(offload.WithDevices("host"), offload.WithTool(log)); err != nil {
		fmt.Println(err)
		return
	}
	x := []float64{1, 2, 3, 4}
	y := []float64{10, 20, 30, 40}
	err := offload.On(0).Run(Axpy, 2.0, offload.To(x), offload.ToFrom(y))
	offload.Stop()
	fmt.Println(y, err)
	fmt.Println(log.kernels, log.copied)
	// Output:
	// [12 24 36 48] <nil>
	// [example.axpy on device 0, task 1] 96
}
