package opencl_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goffload/offload/internal/opencltest"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
	"github.com/goffload/offload/plugins/opencl"
)

// openAll opens two devices on the machine's first OpenCL device
// ("opencl:0,opencl:0": PoCL has one), in the emulate mode (the suite's
// kernels without OpenCL C run their Go bodies over copies of device
// memory, in queue order; those with OpenCL C run on the driver). The test
// skips where there is no OpenCL device, unless GOFFLOAD_REQUIRE_OPENCL is
// set (scripts/test installs PoCL and sets it).
func openAll(t *testing.T) []plugin.Device {
	t.Helper()
	t.Cleanup(opencl.UseEmulationForTests())
	k, ok := plugin.LookupKind("opencl")
	if !ok {
		t.Fatal("the opencl kind is not registered")
	}
	var devs []plugin.Device
	for range 2 {
		ds, err := k.Open("0")
		if err != nil {
			opencltest.Skip(t, "no OpenCL device: opencl:0: %v", err)
		}
		devs = append(devs, ds...)
	}
	return devs
}

// TestConformance runs the conformance suite on the machine's OpenCL
// driver (PoCL in CI) with its default memory: shared virtual memory where
// the device has it, buffers on NVIDIA's platform.
func TestConformance(t *testing.T) {
	plugintest.Run(t, openAll)
}

// TestConformanceBuffers runs it with buffers (GOFFLOAD_OPENCL_SVM=0), as
// on a device without SVM (and NVIDIA's, by default).
func TestConformanceBuffers(t *testing.T) {
	t.Setenv(opencl.SVMEnv, "0")
	plugintest.Run(t, openAll)
}

// TestConformanceStagedWrites runs it with buffers and submits that read
// their host memory when they are issued (StageWritesForTests), as
// NVIDIA's OpenCL reads a non-blocking write's host memory when it is
// enqueued (HostMemoryOrder failed there). On PoCL a retrieve is often
// done before the submit after it is issued, so the suite passes here
// without the kind's wait too: TestHostWritesBeforeSubmit holds the
// queue to check the wait itself.
func TestConformanceStagedWrites(t *testing.T) {
	t.Setenv(opencl.SVMEnv, "0")
	t.Cleanup(opencl.StageWritesForTests())
	plugintest.Run(t, openAll)
}

// TestSpecTypes: "opencl" opens every device GPUs first, then
// accelerators, then CPUs, numbered as "opencl:N" opens them;
// "opencl:gpu", "opencl:accelerator" and "opencl:cpu" open the devices of
// one type in that order, or none (ErrNoDevices, saying what there is);
// another word is a bad spec. On PoCL alone: one CPU device, no GPU; on a
// GPU machine with PoCL too, the GPU first.
func TestSpecTypes(t *testing.T) {
	opencltest.Need(t)
	k, _ := plugin.LookupKind("opencl")
	open := func(arg string) ([]string, error) {
		ds, err := k.Open(arg)
		var names []string
		for _, d := range ds {
			names = append(names, d.Info().Name)
			d.Close()
		}
		return names, err
	}
	all, err := open("")
	if err != nil {
		t.Fatal(err)
	}
	typeOf := func(name string) string { // "NAME (GPU, OpenCL device N: …"
		_, rest, _ := strings.Cut(name, " (")
		typ, _, _ := strings.Cut(rest, ",")
		return strings.ToLower(typ)
	}
	byType := map[string][]string{}
	rank := map[string]int{"gpu": 0, "accelerator": 1, "cpu": 2}
	for i, name := range all {
		typ := typeOf(name)
		if _, ok := rank[typ]; !ok {
			t.Fatalf("device %d: no type in its name %q", i, name)
		}
		if i > 0 && rank[typ] < rank[typeOf(all[i-1])] {
			t.Errorf("device %d (%s) comes after device %d (%s): want GPUs, then accelerators, then CPUs", i, name, i-1, all[i-1])
		}
		if !strings.Contains(name, fmt.Sprintf("OpenCL device %d:", i)) {
			t.Errorf("device %d is named %q, want OpenCL device %d", i, name, i)
		}
		one, err := open(strconv.Itoa(i))
		if err != nil || len(one) != 1 || one[0] != name {
			t.Errorf("opencl:%d opens %q (%v), want %q", i, one, err, name)
		}
		byType[typ] = append(byType[typ], name)
	}
	for _, typ := range []string{"gpu", "accelerator", "cpu", "GPU", "Cpu"} {
		got, err := open(typ)
		want := byType[strings.ToLower(typ)]
		switch {
		case len(want) == 0:
			if !errors.Is(err, plugin.ErrNoDevices) || !strings.Contains(err.Error(), "no OpenCL device of type "+strings.ToLower(typ)) || !strings.Contains(err.Error(), "opencl:0 (") {
				t.Errorf("opencl:%s with no such device: %v, want ErrNoDevices saying so and naming the devices there are", typ, err)
			}
		case err != nil:
			t.Errorf("opencl:%s: %v", typ, err)
		case !slices.Equal(got, want):
			t.Errorf("opencl:%s opens %q, want %q", typ, got, want)
		}
	}
	for _, bad := range []string{"tpu", "gpus", "-1", "gpu:0"} {
		if _, err := open(bad); !errors.Is(err, plugin.ErrBadSpec) || !strings.Contains(err.Error(), "opencl:gpu, opencl:accelerator or opencl:cpu") {
			t.Errorf("opencl:%s: %v, want ErrBadSpec listing the forms", bad, err)
		}
	}
}
