// Command pipeline runs a 1-D heat-diffusion stencil split across every
// configured device: each device keeps its block of cells on the device,
// the blocks trade their edge cells (halos) device to device after every
// step, and depend clauses order it all, so the whole run is enqueued up
// front and devices overlap. It checks the result against the same stencil
// computed on the host, bit for bit.
//
//	go run ./examples/pipeline
//	go build -tags mpi -o app . && mpirun -np 3 ./app   # two MPI devices
//	GOFFLOAD_DEVICES=host,local:2 go run ./examples/pipeline
//	GOFFLOAD_DEVICES=cuda,host go run ./examples/pipeline   # the GPUs (the PTX goffload-gen made) and the host's cores
//	GOFFLOAD_PROFILE=trace.json go run ./examples/pipeline   # then open trace.json in Perfetto
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
	"github.com/goffload/offload/role"
)

const alpha = 0.25

// Step computes one diffusion step of the n cells of next from cur, whose
// first and last elements (0 and n+1) are halo cells from the neighbours.
// Both are resident on the device (entered once), so their directions only
// say what the kernel does with them; next is InOut rather than Out because
// the kernel leaves its halo cells alone, and an Out buffer that was not
// present would bring the device's uninitialized halos back. On an OpenCL
// device it runs the OpenCL C that go generate made from this body, and
// on a GPU the PTX clang made of that (zz_offload_gen.go): both compute
// each cell with the body's operations in its order, without fused
// multiply-adds, so every device's cells are bit for bit the host's.
var Step = offload.MustKernel3("pipeline.step", func(ctx offload.Ctx, n int, next offload.InOut[float64], cur offload.In[float64]) {
	ctx.For(n, func(lo, hi int) {
		for i := lo + 1; i <= hi; i++ {
			next[i] = cur[i] + alpha*(cur[i-1]-2*cur[i]+cur[i+1])
		}
	})
}).Named("n", "next", "cur")

func main() {
	cells := flag.Int("n", 1<<20, "cells")
	steps := flag.Int("steps", 200, "time steps")
	flag.Parse()
	if err := run(*cells, *steps); err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err)
		os.Exit(1)
	}
}

// block is one device's share: two arrays (current and next) of its cells
// plus a halo cell at each end.
type block struct {
	dev    offload.Device
	lo, hi int // the cells it owns, [lo, hi)
	buf    [2][]float64
}

func initial(i, n int) float64 {
	if i > n/4 && i < n/2 {
		return 100
	}
	return float64(i%17) * 0.1
}

func run(n, steps int) error {
	var opts []offload.Option
	if _, set := os.LookupEnv("GOFFLOAD_DEVICES"); !set && !role.UnderMPI() {
		// Under mpirun (built with -tags mpi) the default devices are the
		// job's other ranks.
		opts = append(opts, offload.WithDevices("local:2"))
	}
	if err := offload.Start(opts...); err != nil {
		return err
	}
	defer offload.Stop()

	parts := max(offload.NumDevices(), 1)
	blocks := make([]*block, parts)
	for p := range blocks {
		b := &block{dev: offload.On(p), lo: p * n / parts, hi: (p + 1) * n / parts}
		blocks[p] = b
		if offload.NumDevices() == 0 {
			b.dev = offload.Initial()
		}
		for k := range b.buf {
			b.buf[k] = make([]float64, b.hi-b.lo+2)
			for i := b.lo - 1; i <= b.hi; i++ { // halos hold the neighbours' cells, or 0 at the ends
				if i >= 0 && i < n {
					b.buf[k][i-b.lo+1] = initial(i, n)
				}
			}
		}
		info, err := b.dev.Info()
		if err != nil {
			return err
		}
		fmt.Printf("device %d (%s, pid %d): cells [%d, %d)\n", b.dev.Num(), info.Kind, info.PID, b.lo, b.hi)
		if err := b.dev.EnterData(offload.To(b.buf[0]).Named(fmt.Sprintf("u%d", p)), offload.To(b.buf[1]).Named(fmt.Sprintf("v%d", p))); err != nil {
			return err
		}
	}

	start := time.Now()
	var g offload.Group
	for s := 0; s < steps; s++ {
		cur, next := s%2, (s+1)%2
		for _, b := range blocks {
			c, x := b.buf[cur], b.buf[next]
			m := len(c) - 2
			// Reads the current cells and both halos; writes the next cells.
			Step.Nowait(b.dev.Nowait(offload.DependIn(c[1:m+1]), offload.DependIn(&c[0]), offload.DependIn(&c[m+1]),
				offload.DependOut(x[1:m+1])).In(&g), m, x, c)
		}
		// Halo exchange, device to device: each block's edge cells of the
		// next step go to its neighbours' halo cells.
		for p, b := range blocks {
			x := b.buf[next]
			m := len(x) - 2
			if p > 0 {
				if err := halo(&g, b, x, 1, blocks[p-1], blocks[p-1].buf[next], len(blocks[p-1].buf[next])-1); err != nil {
					return err
				}
			}
			if p < parts-1 {
				if err := halo(&g, b, x, m, blocks[p+1], blocks[p+1].buf[next], 0); err != nil {
					return err
				}
			}
		}
	}
	final := steps % 2
	for p, b := range blocks {
		u := b.buf[final]
		b.dev.Nowait(offload.DependIn(u[1 : len(u)-1])).In(&g).Update(offload.From(u[1 : len(u)-1]).Named(fmt.Sprintf("u%d", p)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := g.Wait(ctx); err != nil {
		return err
	}
	elapsed := time.Since(start)
	for _, b := range blocks {
		if err := b.dev.ExitData(offload.Delete(b.buf[0]), offload.Delete(b.buf[1])); err != nil {
			return err
		}
	}

	// The same stencil on the host.
	cur, next := make([]float64, n+2), make([]float64, n+2)
	for i := 0; i < n; i++ {
		cur[i+1] = initial(i, n)
	}
	copy(next, cur)
	for s := 0; s < steps; s++ {
		for i := 1; i <= n; i++ {
			next[i] = cur[i] + alpha*(cur[i-1]-2*cur[i]+cur[i+1])
		}
		cur, next = next, cur
	}
	bad := 0
	for _, b := range blocks {
		u := b.buf[final]
		for i := b.lo; i < b.hi; i++ {
			if got, want := u[i-b.lo+1], cur[i+1]; math.Float64bits(got) != math.Float64bits(want) {
				if bad < 5 {
					fmt.Printf("cell %d: got %g, want %g\n", i, got, want)
				}
				bad++
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d cells differ from the host computation", bad, n)
	}
	fmt.Printf("pipeline: %d steps of %d cells on %d device(s) in %v (%d tasks): verified against the host, all %d cells match bit for bit\n",
		steps, n, parts, elapsed.Round(time.Millisecond), steps*(3*parts-2)+parts, n)
	return nil
}

// halo copies cell i of src (block from) to cell j of dst (block to) as a
// task, device to device.
func halo(g *offload.Group, from *block, src []float64, i int, to *block, dst []float64, j int) error {
	sp, err := from.dev.MappedPtr(src[i : i+1])
	if err != nil {
		return err
	}
	dp, err := to.dev.MappedPtr(dst[j : j+1])
	if err != nil {
		return err
	}
	m := len(src) - 2
	from.dev.Nowait(offload.DependIn(src[1:m+1]), offload.DependOut(&dst[j])).In(g).Memcpy(dp, sp, 8)
	return nil
}
