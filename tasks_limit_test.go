package offload_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goffload/offload"
)

var limitRunning, limitMax atomic.Int32

// limitProbe counts the kernels running at once on its device.
var limitProbe = offload.MustKernel("test.limit.probe", func(ms int64, x []int32) {
	n := limitRunning.Add(1)
	for m := limitMax.Load(); n > m && !limitMax.CompareAndSwap(m, n); m = limitMax.Load() {
	}
	time.Sleep(time.Duration(ms) * time.Millisecond)
	limitRunning.Add(-1)
	x[0] = limitMax.Load() // the most seen in the device's process
})

// TestDeviceTasksBound (issue 34): WithDeviceTasks (and
// GOFFLOAD_DEVICE_TASKS) bounds how many tasks run at once on one device,
// per kind, on the host kind and on device processes; independent tasks
// beyond it wait on the device, and all complete.
func TestDeviceTasksBound(t *testing.T) {
	for _, c := range []struct {
		devices, opt, env string
		want              int32
	}{
		{"host", "1", "", 1},
		{"host", "local=3,host=2", "", 2},
		{"local", "", "2", 2}, // a device process reads its own environment (inherited)
	} {
		if c.env != "" {
			t.Setenv("GOFFLOAD_DEVICE_TASKS", c.env)
		}
		opts := []offload.Option{offload.WithDevices(c.devices)}
		if c.opt != "" {
			opts = append(opts, offload.WithDeviceTasks(c.opt))
		}
		if err := offload.Start(opts...); err != nil {
			t.Fatal(err)
		}
		limitMax.Store(0)
		var g offload.Group
		outs := make([][]int32, 6)
		for i := range outs {
			outs[i] = make([]int32, 1)
			g.Add(offload.On(0).Nowait().Run(limitProbe, int64(20), offload.From(outs[i])))
		}
		err := g.Wait(t.Context())
		if err := errors.Join(err, offload.Stop()); err != nil {
			t.Fatal(err)
		}
		most := int32(0)
		for _, o := range outs {
			most = max(most, o[0])
		}
		if most != c.want {
			t.Errorf("%s, WithDeviceTasks(%q), GOFFLOAD_DEVICE_TASKS=%q: %d kernels ran at once, want %d", c.devices, c.opt, c.env, most, c.want)
		}
	}
	if err := offload.Start(offload.WithDevices("host"), offload.WithDeviceTasks("host=0")); !errors.Is(err, offload.ErrConfig) {
		offload.Stop()
		t.Errorf("WithDeviceTasks(\"host=0\"): %v, want ErrConfig", err)
	}
	if err := offload.Start(offload.WithDevices("host"), offload.WithDeviceTasks("nosuchkind=2")); !errors.Is(err, offload.ErrConfig) {
		offload.Stop()
		t.Errorf("WithDeviceTasks(\"nosuchkind=2\"): %v, want ErrConfig", err)
	}
}
