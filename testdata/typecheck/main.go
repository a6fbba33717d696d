// Command typecheck does not compile: TestTypedLaunchIsCompileChecked runs
// go vet on it and expects each wrong launch below to be a type error.
package main

import "github.com/goffload/offload"

var (
	Saxpy = offload.MustKernel3("saxpy", func(ctx offload.Ctx, a float32, x offload.In[float32], y offload.InOut[float32]) {})
	Scale = offload.MustKernel2("scale", func(ctx offload.Ctx, k int, y offload.InOut[float32]) {})
)

func main() {
	dev := offload.Default()
	x := make([]float32, 8)
	x64 := make([]float64, 8)
	var n int32 = 2
	_ = Saxpy.Run(dev, 2, x, x)   // fine
	_ = Scale.Run(dev, n, x)      // int32 for int
	_ = Saxpy.Run(dev, 2, x64, x) // []float64 for In[float32]
	_ = Scale.Nowait(offload.Nowait(), 0.5, x)
}
