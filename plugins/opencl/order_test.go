package opencl

import (
	"slices"
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
