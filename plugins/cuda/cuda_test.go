package cuda_test

import (
	"testing"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
	"github.com/goffload/offload/plugins/cuda"
)

// smallGPU is a fake GPU whose 4 multiprocessors are the cores the
// emulated kernels' loops split over.
var smallGPU = cudafake.GPU{Name: "Fake GPU", Major: 8, Minor: 0, SMs: 4, Memory: 1 << 30}

// fakeDevices opens every GPU of a fake driver with gpus, in the emulate
// mode (the suite's kernels have no PTX: their Go bodies run on the host
// over copies of device memory, inside the queues' order).
func fakeDevices(t *testing.T, drv *cudafake.Driver, ord int) []plugin.Device {
	t.Helper()
	devs, err := cuda.OpenWith(drv, ord, true)
	if err != nil {
		t.Fatalf("opening fake GPUs: %v", err)
	}
	return devs
}

// TestConformanceFake runs the conformance suite on two fake GPUs: the
// kind's memory, staging copies, peer exchange, queues, events, waits
// across devices and error states over a driver whose streams are
// asynchronous.
func TestConformanceFake(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{smallGPU, smallGPU}})
	plugintest.Run(t, func(t *testing.T) []plugin.Device { return fakeDevices(t, drv, -1) })
	if n := drv.PageableCopies(); n != 0 {
		t.Errorf("%d asynchronous copies used pageable (Go) memory, want none: host memory goes through staging buffers", n)
	}
}

// TestConformanceFakeOneGPU: two devices on one GPU share its primary
// context (GOFFLOAD_DEVICES=cuda:0,cuda:0).
func TestConformanceFakeOneGPU(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{smallGPU}})
	plugintest.Run(t, func(t *testing.T) []plugin.Device {
		return append(fakeDevices(t, drv, 0), fakeDevices(t, drv, 0)...)
	})
}

var _ cudadrv.Driver = (*cudafake.Driver)(nil)
