package offload_test

import (
	"fmt"

	"github.com/goffload/offload"
)

// LookupArgs holds the nine parameters of an XSBench-like lookup kernel.
// A kernel takes at most eight parameters after its Ctx; a struct
// parameter holds any number. Each field is a parameter of its own: a
// scalar goes by value, and a field of type In, Out or InOut is mapped as
// that type says, as a parameter of that type would be. An OpenCL C or PTX
// body sees the fields as separate parameters, in field order.
type LookupArgs struct {
	N        int32
	Grid     offload.In[float64]
	Index    offload.In[int32]
	Energies offload.In[float64]
	Nuclides offload.In[int32]
	Conc     offload.In[float64]
	Mats     offload.In[int32]
	Seeds    offload.In[uint64]
	Out      offload.Out[float64]
}

// Lookup sums, for each lookup i, a value read through two index arrays.
var Lookup = offload.MustKernel1("example.lookup", func(ctx offload.Ctx, a LookupArgs) {
	ctx.For(int(a.N), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			m := a.Mats[i]
			a.Out[i] = a.Grid[a.Index[m]] * a.Conc[a.Nuclides[m]] * a.Energies[i] * float64(a.Seeds[i])
		}
	})
})

// A kernel with more parameters than MustKernel8 takes: a struct whose
// fields are the parameters, mapped by their types.
func ExampleMustKernel1_manyParameters() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	out := make([]float64, 3)
	err := Lookup.Run(offload.On(0), LookupArgs{
		N:        3,
		Grid:     []float64{1, 2, 3},
		Index:    []int32{2, 0, 1},
		Energies: []float64{1, 10, 100},
		Nuclides: []int32{1, 0, 1},
		Conc:     []float64{0.5, 2},
		Mats:     []int32{0, 1, 2},
		Seeds:    []uint64{1, 1, 2},
		Out:      out,
	})
	fmt.Println(out, err)
	// Output:
	// [6 5 800] <nil>
}
