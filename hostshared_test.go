package offload_test

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/goffload/offload"
)

// TestHostSharedMemory: with GOFFLOAD_HOST_MEMORY=shared, host devices work
// on the program's buffers in place (OpenMP's unified shared memory): the
// device address of a mapped buffer is its host address, kernels change the
// buffer itself, and maps and updates copy nothing, while reference counts,
// present and partly overlapping maps behave as on any device.
func TestHostSharedMemory(t *testing.T) {
	t.Setenv("GOFFLOAD_HOST_MEMORY", "shared")
	start(t, offload.WithDevices("host:2"), offload.WithOffload("MANDATORY"))
	for n := range 2 {
		dev := offload.On(n)
		if info, err := dev.Info(); err != nil || !strings.Contains(info.Name, "shared memory") {
			t.Errorf("device %d: %+v, %v; want a name that says it shares memory", n, info, err)
		}
		x := filled(1000, 1)
		if err := dev.EnterData(offload.To(x)); err != nil {
			t.Fatal(err)
		}
		p, err := dev.MappedPtr(x)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := p.Addr(), uintptr(unsafe.Pointer(&x[0])); got != want {
			t.Errorf("device %d: device address %#x, want the host address %#x", n, got, want)
		}
		// A kernel on the present buffer changes the host's memory: no
		// copy back was asked for (the count stays above zero).
		if err := dev.Run(Fill, int32(5), x); err != nil {
			t.Fatal(err)
		}
		if !allEqual(x, 5) {
			t.Errorf("device %d: after a kernel on the present buffer the host sees %d, want 5", n, x[0])
		}
		// Updates copy nothing: the host's writes are the device's.
		setAll(x, 7)
		if err := dev.Update(offload.From(x)); err != nil {
			t.Fatal(err)
		}
		if !allEqual(x, 7) {
			t.Errorf("device %d: target update from overwrote the host's 7 with %d", n, x[0])
		}
		if err := dev.Run(AddTo, int32(1), x); err != nil {
			t.Fatal(err)
		}
		if !allEqual(x, 8) {
			t.Errorf("device %d: kernel after the host wrote 7: %d, want 8", n, x[0])
		}
		if dyn, _, ok := entryOf(n, x); !ok || dyn != 1 {
			t.Errorf("device %d: entry %v with count %d, want present with 1", n, ok, dyn)
		}
		// A section inside is present; one that runs past it is refused.
		big := make([]int32, 2000)
		if err := dev.EnterData(offload.To(big[:1000])); err != nil {
			t.Fatal(err)
		}
		if !dev.IsPresent(big[100:200]) {
			t.Errorf("device %d: a section inside a mapped buffer is not present", n)
		}
		if err := dev.EnterData(offload.To(big[500:1500])); !errors.Is(err, offload.ErrExtension) {
			t.Errorf("device %d: a map that partly overlaps a mapping: %v, want ErrExtension", n, err)
		}
		y := make([]int32, 10)
		if err := dev.EnterData(offload.To(y).Present()); !errors.Is(err, offload.ErrNotPresent) {
			t.Errorf("device %d: present modifier on an unmapped buffer: %v, want ErrNotPresent", n, err)
		}
		if err := dev.ExitData(offload.Delete(big[:1000])); err != nil {
			t.Fatal(err)
		}
		if err := dev.ExitData(offload.From(x)); err != nil {
			t.Fatal(err)
		}
		if dev.IsPresent(x) || !allEqual(x, 8) {
			t.Errorf("device %d: after exit data present %v, host %d (want not present, 8)", n, dev.IsPresent(x), x[0])
		}
		// Memory from the memory routines is still the device's own.
		dp, err := dev.Alloc(16)
		if err != nil {
			t.Fatal(err)
		}
		src := []int32{1, 2, 3, 4}
		if err := offload.Memcpy(dp, offload.HostPtr(src), 16); err != nil {
			t.Fatal(err)
		}
		src[0] = 9
		out := make([]int32, 4)
		if err := offload.Memcpy(offload.HostPtr(out), dp, 16); err != nil {
			t.Fatal(err)
		}
		if out[0] != 1 {
			t.Errorf("device %d: device memory from Alloc follows the host's buffer: %v", n, out)
		}
		if err := offload.Free(dp); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostSeparateMemoryDefault: without GOFFLOAD_HOST_MEMORY a host
// device's memory is its own: a kernel on a present buffer leaves the
// host's copy alone until it is copied back.
func TestHostSeparateMemoryDefault(t *testing.T) {
	t.Setenv("GOFFLOAD_HOST_MEMORY", "")
	start(t, offload.WithDevices("host"), offload.WithOffload("MANDATORY"))
	dev := offload.On(0)
	x := filled(100, 1)
	if err := dev.EnterData(offload.To(x)); err != nil {
		t.Fatal(err)
	}
	if err := dev.Run(Fill, int32(5), x); err != nil {
		t.Fatal(err)
	}
	if !allEqual(x, 1) {
		t.Errorf("the host sees %d before any copy back, want 1", x[0])
	}
	if err := dev.ExitData(offload.From(x)); err != nil {
		t.Fatal(err)
	}
	if !allEqual(x, 5) {
		t.Errorf("after exit data from: %d, want 5", x[0])
	}
}

// TestHostMemoryEnv: a GOFFLOAD_HOST_MEMORY that is neither separate nor
// shared is an error at Start that names the variable, the value and the
// choices.
func TestHostMemoryEnv(t *testing.T) {
	t.Setenv("GOFFLOAD_HOST_MEMORY", "unified")
	err := offload.Start(offload.WithDevices("host"))
	if err == nil {
		offload.Stop()
		t.Fatal("Start with GOFFLOAD_HOST_MEMORY=unified succeeded")
	}
	if msg := err.Error(); !errors.Is(err, offload.ErrConfig) || !strings.Contains(msg, `GOFFLOAD_HOST_MEMORY="unified"`) || !strings.Contains(msg, "separate") || !strings.Contains(msg, "shared") {
		t.Errorf("Start: %v; want ErrConfig naming the variable, the value and the choices", err)
	}
}

// TestHostSharedDeclareTarget: on host devices that share the program's
// memory, declare target variables still have a copy per device, which
// target update moves (only a HostSharer's entries are copied by nothing).
func TestHostSharedDeclareTarget(t *testing.T) {
	t.Setenv("GOFFLOAD_HOST_MEMORY", "shared")
	declCounter.Host()[0] = 7
	start(t, offload.WithDevices("host:2"), offload.WithOffload("MANDATORY"))
	declRun(t, offload.On(0), declAdd, int64(10))
	if v := readCounter(t, offload.On(1)); v != 7 {
		t.Errorf("device 1's counter %d after device 0 added 10, want its own 7", v)
	}
	if declCounter.Host()[0] != 7 {
		t.Errorf("host counter %d after a device's kernel, want 7", declCounter.Host()[0])
	}
	declUpdate(t, offload.On(0), offload.From(declCounter.Host()))
	if declCounter.Host()[0] != 17 {
		t.Errorf("host counter %d after Update(From) of device 0, want 17", declCounter.Host()[0])
	}
	declCounter.Host()[0] = 100
	declUpdate(t, offload.On(1), offload.To(declCounter.Host()))
	if v := readCounter(t, offload.On(1)); v != 100 {
		t.Errorf("device 1's counter %d after Update(To) of 100", v)
	}
}
