package offload_test

import (
	"fmt"

	"github.com/goffload/offload"
)

// Saxpy's parameter types say how its buffers move: x to the device, y to
// it and back. Named names them for the info output and errors.
var Saxpy = offload.MustKernel3("example.saxpy", func(ctx offload.Ctx, a float32, x offload.In[float32], y offload.InOut[float32]) {
	ctx.For(len(y), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] += a * x[i]
		}
	})
}).Named("a", "x", "y")

// A typed launch: the compiler checks the arguments (a float64 for a, or a
// []float64 for x, does not build), and the parameter types are the map
// clauses.
func ExampleKernel3_Run() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	x := []float32{1, 2, 3}
	y := []float32{10, 20, 30}
	err := Saxpy.Run(offload.On(0), 2, x, y)
	fmt.Println(y, err)

	// With replaces a declared map for one launch: y only goes to the
	// device, so the host's y stays as it is.
	err = Saxpy.With(offload.To(y)).Run(offload.On(0), 2, x, y)
	fmt.Println(y, err)
	// Output:
	// [12 24 36] <nil>
	// [12 24 36] <nil>
}

// The if clause: small problems run on the initial device (the program
// itself), large ones on the device.
func ExampleDevice_If() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	for _, n := range []int{10, 100000} {
		out := []int32{-1}
		_ = whereRan.Run(offload.On(0).If(n > 1000), out)
		fmt.Printf("n=%d ran on the initial device: %v\n", n, int(out[0]) == offload.NumDevices())
	}
	// Output:
	// n=10 ran on the initial device: true
	// n=100000 ran on the initial device: false
}

// Particles is a struct that holds slices: a kernel parameter of this type
// gets each slice mapped as its tag says and attached in the device's copy
// (OpenMP's pointer attachment, a declare mapper written as tags).
type Particles struct {
	N   int
	Pos []float64 `offload:"tofrom"`
	Vel []float64 `offload:"to"`
}

// Move takes a Particles by value: its slices are device memory inside.
var Move = offload.MustKernel2("example.move", func(ctx offload.Ctx, dt float64, p Particles) {
	for i := 0; i < p.N; i++ {
		p.Pos[i] += dt * p.Vel[i]
	}
})

func ExampleKernel2_Run_struct() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	p := Particles{N: 2, Pos: []float64{0, 1}, Vel: []float64{1, -1}}
	err := Move.Run(offload.On(0), 0.5, p)
	fmt.Println(p.Pos, err)
	// Output: [0.5 0.5] <nil>
}

// Copy moves elements of a buffer between two devices' copies of it, by
// slice: here device 0's first two elements to device 1.
func ExampleCopy() {
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	x := []float64{1, 2, 3}
	_ = offload.On(0).EnterData(offload.To(x))
	_ = offload.On(1).EnterData(offload.Alloc(x))
	err := offload.Copy(offload.On(1), x[:2], offload.On(0), x[:2])
	back := make([]float64, 3)
	_ = offload.Copy(offload.Initial(), back[:2], offload.On(1), x[:2])
	fmt.Println(back[:2], err)
	_ = offload.On(0).ExitData(offload.Delete(x))
	_ = offload.On(1).ExitData(offload.Delete(x))
	// Output: [1 2] <nil>
}

// use_device_ptr: inside the region, px is x's device memory, to hand to
// code that takes device addresses.
func ExampleUseDevicePtr() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	d := offload.On(0)
	x := []float64{1, 2, 3}
	var px offload.DevicePtr
	err := d.Data(func() error {
		mapped, _ := d.MappedPtr(x)
		fmt.Println("device address:", px.Addr() == mapped.Addr(), "bytes:", px.Size())
		return nil
	}, offload.To(x), offload.UseDevicePtr(x, &px))
	fmt.Println("after the region, nil:", px.IsNil(), err)
	// Output:
	// device address: true bytes: 24
	// after the region, nil: true <nil>
}
