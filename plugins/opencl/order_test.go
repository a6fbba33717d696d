package opencl

import (
	"slices"
	"strings"
	"testing"

	"github.com/goffload/offload/internal/cldrv"
)

// TestOrderByType: the kind numbers devices GPUs first, then
// accelerators, then CPUs, each type in the loader's order (PoCL's CPU
// device listed before NVIDIA's GPU, as on the H100 machine, comes
// second).
func TestOrderByType(t *testing.T) {
	const (
		cpu = cldrv.TypeCPU
		gpu = cldrv.TypeGPU
		acc = cldrv.TypeAccelerator
		def = 1 // CL_DEVICE_TYPE_DEFAULT alone: a CPU for the order
	)
	for _, c := range []struct {
		name string
		typs []uint64
		want []int
	}{
		{"none", nil, []int{}},
		{"PoCL then NVIDIA", []uint64{cpu, gpu}, []int{1, 0}},
		{"NVIDIA then PoCL", []uint64{gpu, cpu}, []int{0, 1}},
		{"CPUs only", []uint64{cpu, cpu | def}, []int{0, 1}},
		{"mixed", []uint64{cpu, gpu, acc, gpu | def, cpu, def, gpu | cpu, acc | cpu}, []int{1, 3, 6, 2, 7, 0, 4, 5}},
	} {
		if got := orderByType(c.typs); !slices.Equal(got, c.want) {
			t.Errorf("%s: orderByType(%v) = %v, want %v", c.name, c.typs, got, c.want)
		}
	}
}

// TestUseSVM: memory is SVM where the device has coarse-grained SVM
// buffers, except on NVIDIA's platform (its clSVMAlloc failed concurrent
// allocations on an H100), unless GOFFLOAD_OPENCL_SVM says: 0 buffers, 1
// SVM where the device has it; another value is an error naming it.
func TestUseSVM(t *testing.T) {
	const coarse = cldrv.SVMCoarseGrainBuffer
	for _, c := range []struct {
		caps     uint64
		platform string
		env      string
		want     bool
	}{
		{coarse, "Portable Computing Language", "", true},
		{coarse, "Portable Computing Language", "0", false},
		{coarse, "Portable Computing Language", " 1 ", true},
		{0, "Portable Computing Language", "1", false},
		{coarse, "NVIDIA CUDA", "", false},
		{coarse, "NVIDIA CUDA", "0", false},
		{coarse, "NVIDIA CUDA", "1", true},
		{0, "NVIDIA CUDA", "1", false},
	} {
		got, err := useSVM(c.caps, c.platform, c.env)
		if err != nil || got != c.want {
			t.Errorf("useSVM(%#x, %q, %q) = %v, %v; want %v, nil", c.caps, c.platform, c.env, got, err, c.want)
		}
	}
	if _, err := useSVM(coarse, "NVIDIA CUDA", "yes"); err == nil || !strings.Contains(err.Error(), `GOFFLOAD_OPENCL_SVM="yes"`) {
		t.Errorf("useSVM with GOFFLOAD_OPENCL_SVM=yes: error %v, want one naming the variable and value", err)
	}
}
