package tool_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/tool"
)

// TestKindNames: each kind names itself, and an unknown one says what it
// is rather than panicking.
func TestKindNames(t *testing.T) {
	want := map[tool.DataKind]string{tool.CopyToDevice: "copy to device", tool.CopyFromDevice: "copy from device",
		tool.CopyDeviceToDevice: "copy device to device", tool.MapCreate: "map create", tool.MapRemove: "map remove",
		-1: "data op", 99: "data op"}
	for k, s := range want {
		if k.String() != s {
			t.Errorf("DataKind(%d) = %q, want %q", int(k), k, s)
		}
	}
	if tool.OpSubmit != plugin.OpSubmit || tool.OpLaunch.String() != "launch" {
		t.Errorf("OpKind: %v %v, want the plugin queue's kinds", tool.OpSubmit, tool.OpLaunch)
	}
}

// launches counts kernel launches.
type launches struct{ n atomic.Int64 }

func (l *launches) TargetBegin(tool.TargetEvent)  {}
func (l *launches) TargetEnd(tool.TargetEvent)    {}
func (l *launches) DataOp(tool.DataEvent)         {}
func (l *launches) KernelLaunch(tool.KernelEvent) { l.n.Add(1) }
func (l *launches) Wait(tool.WaitEvent)           {}

var double = offload.MustKernel1("tool.example.double", func(ctx offload.Ctx, x offload.InOut[float64]) {
	for i := range x {
		x[i] *= 2
	}
})

// A Tool that counts kernel launches.
func Example() {
	var l launches
	if err := offload.Start(offload.WithDevices("host"), offload.WithTool(&l)); err != nil {
		fmt.Println(err)
		return
	}
	x := []float64{1, 2}
	for range 3 {
		_ = double.Run(offload.On(0), x)
	}
	_ = offload.Stop()
	fmt.Println(x, l.n.Load())
	// Output:
	// [8 16] 3
}
