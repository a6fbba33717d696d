// Command nbody moves N bodies under gravity with tasks that the runtime
// places itself (offload.Any): each step, every part of the bodies gets its
// accelerations from all the positions, then moves. The parts' tasks go to
// whichever device is expected to finish them first, and each part's
// positions follow its tasks from device to device; the program names no
// device and maps nothing. It checks the result against the same steps in
// plain Go and prints where the tasks ran. By default it starts two device
// processes of its own (GOFFLOAD_DEVICES=local:2).
//
//	go run ./examples/nbody
//	GOFFLOAD_DEVICES=host:2 go run ./examples/nbody -n 4096 -steps 20
//	GOFFLOAD_INFO=placement go run ./examples/nbody   # every placement, and why
//	GOFFLOAD_DEVICES=opencl,host go run ./examples/nbody   # PoCL and the host, by measured speed
//
// Its kernels' OpenCL C is made from their Go bodies by goffload-gen
// (zz_offload_gen.go), so offload.Any may place them on OpenCL devices.
package main

//go:generate go run github.com/goffload/offload/cmd/goffload-gen

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/examples/internal/launches"
	"github.com/goffload/offload/role"
)

// Accel sets the accelerations (ax, ay) of the bodies from lo on, one per
// element of ax, from every body's position (x, y) and mass m.
var Accel = offload.MustKernel6("nbody.accel", func(ctx offload.Ctx, lo int, x, y, m offload.In[float64], ax, ay offload.Out[float64]) {
	ctx.For(len(ax), func(a, b int) {
		for i := a; i < b; i++ {
			xi, yi := x[lo+i], y[lo+i]
			var sx, sy float64
			for j := range x {
				dx, dy := x[j]-xi, y[j]-yi
				r2 := dx*dx + dy*dy + softening
				inv := m[j] / (r2 * math.Sqrt(r2))
				sx += dx * inv
				sy += dy * inv
			}
			ax[i], ay[i] = sx, sy
		}
	})
}).Named("lo", "x", "y", "m", "ax", "ay")

// Move advances a part of the bodies by one time step.
var Move = offload.MustKernel6("nbody.move", func(ctx offload.Ctx, ax, ay offload.In[float64], vx, vy, x, y offload.InOut[float64]) {
	for i := range x {
		vx[i] += ax[i] * dt
		vy[i] += ay[i] * dt
		x[i] += vx[i] * dt
		y[i] += vy[i] * dt
	}
}).Named("ax", "ay", "vx", "vy", "x", "y")

const (
	dt        = 1e-3
	softening = 1e-2
)

// Bodies are the state of the system, one element per body.
type Bodies struct{ X, Y, VX, VY, AX, AY, M []float64 }

// NewBodies places n bodies on a disc, at rest, with masses that vary.
func NewBodies(n int) *Bodies {
	b := &Bodies{}
	for _, s := range []*[]float64{&b.X, &b.Y, &b.VX, &b.VY, &b.AX, &b.AY, &b.M} {
		*s = make([]float64, n)
	}
	for i := range n {
		a, r := float64(i)*2.399963, math.Sqrt(float64(i)/float64(n))
		b.X[i], b.Y[i], b.M[i] = r*math.Cos(a), r*math.Sin(a), 1/float64(n)*(1+float64(i%3))
	}
	return b
}

// Step makes the tasks of one time step over parts parts, all Any-tasks.
func Step(b *Bodies, parts int) {
	n := len(b.X)
	part := func(s []float64, p int) []float64 { return s[p*n/parts : (p+1)*n/parts] }
	for p := range parts {
		Accel.Nowait(offload.Any().Nowait(), p*n/parts, b.X, b.Y, b.M, part(b.AX, p), part(b.AY, p))
	}
	for p := range parts {
		Move.Nowait(offload.Any().Nowait(), part(b.AX, p), part(b.AY, p), part(b.VX, p), part(b.VY, p), part(b.X, p), part(b.Y, p))
	}
}

// Reference makes steps steps of the same computation in plain Go.
func Reference(b *Bodies, steps int) {
	for range steps {
		for i := range b.X {
			var sx, sy float64
			for j := range b.X {
				dx, dy := b.X[j]-b.X[i], b.Y[j]-b.Y[i]
				r2 := dx*dx + dy*dy + softening
				inv := b.M[j] / (r2 * math.Sqrt(r2))
				sx += dx * inv
				sy += dy * inv
			}
			b.AX[i], b.AY[i] = sx, sy
		}
		for i := range b.X {
			b.VX[i] += b.AX[i] * dt
			b.VY[i] += b.AY[i] * dt
			b.X[i] += b.VX[i] * dt
			b.Y[i] += b.VY[i] * dt
		}
	}
}

func main() {
	n := flag.Int("n", 2048, "bodies")
	steps := flag.Int("steps", 10, "time steps")
	parts := flag.Int("parts", 4, "parts of the bodies, a task each per step")
	flag.Parse()
	if err := run(*n, *steps, *parts); err != nil {
		fmt.Fprintln(os.Stderr, "nbody:", err)
		os.Exit(1)
	}
}

func run(n, steps, parts int) error {
	if n < parts || parts < 1 || steps < 1 {
		return fmt.Errorf("want -n ≥ -parts ≥ 1 and -steps ≥ 1")
	}
	ran := &launches.Counter{}
	opts := []offload.Option{offload.WithTool(ran)}
	if _, set := os.LookupEnv("GOFFLOAD_DEVICES"); !set && !role.UnderMPI() {
		// Two device processes of its own, as the other examples start.
		opts = append(opts, offload.WithDevices("local:2"))
	}
	if err := offload.Start(opts...); err != nil {
		return err
	}
	defer offload.Stop()
	b := NewBodies(n)
	start := time.Now()
	for range steps {
		Step(b, parts)
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		return err
	}
	elapsed := time.Since(start)
	want := NewBodies(n)
	Reference(want, steps)
	for i := range b.X {
		if d := math.Hypot(b.X[i]-want.X[i], b.Y[i]-want.Y[i]); d > 1e-9 {
			return fmt.Errorf("body %d at (%g, %g), want (%g, %g)", i, b.X[i], b.Y[i], want.X[i], want.Y[i])
		}
	}
	fmt.Printf("%d bodies, %d steps in %d parts: %v, result verified\n", n, steps, parts, elapsed.Round(time.Microsecond))
	ran.Print(os.Stdout)
	return nil
}
