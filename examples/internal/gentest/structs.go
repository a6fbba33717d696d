package gentest

import (
	"math"

	"github.com/goffload/offload"
)

// Particle is a struct of scalars in a buffer: its C struct has Go's
// layout (the bool a byte, the padding where Go has it).
type Particle struct {
	X, Y  float64
	M     float32
	Alive bool
	ID    int32
}

// Params is a struct of scalars passed by value (its fields are the
// entry's parameters, rebuilt as a struct).
type Params struct {
	DT    float64
	Scale float32
	Steps int
}

// Grid is a struct parameter with slices: each field a parameter.
type Grid struct {
	N   int
	In  offload.In[float64]
	Out offload.Out[float64]
}

// kick moves p: a struct by value in and out of a function.
func kick(p Particle, dt float64) Particle {
	p.X += p.Y * dt
	if !p.Alive {
		p.ID = -p.ID
	}
	return p
}

// Structs updates particles: struct elements read and written whole and
// by field, a composite literal, a struct parameter and a function.
var Structs = offload.MustKernel3("structs", func(ctx offload.Ctx, prm Params, ps offload.InOut[Particle], out offload.Out[float64]) {
	ctx.For(len(ps), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			p := ps[i]
			for range prm.Steps {
				p = kick(p, prm.DT)
			}
			q := Particle{X: p.X * 2, M: p.M * prm.Scale, Alive: p.ID > 0, ID: p.ID + 1}
			ps[i] = q
			ps[i].Y = p.Y - 1
			out[i] = q.X + float64(q.M)
		}
	})
})

// Fields reads and writes the slices of a struct parameter.
var Fields = offload.MustKernel1("fields", func(ctx offload.Ctx, g Grid) {
	ctx.For(g.N, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g.Out[i] = g.In[i] * float64(len(g.In))
		}
	})
})

// Chunks is ctx.ForChunks: each chunk's elements, whatever the chunks.
var Chunks = offload.MustKernel2("chunks", func(ctx offload.Ctx, x offload.In[int32], out offload.Out[int64]) {
	ctx.ForChunks(len(x), func(c offload.Chunk) {
		if c.Index < 0 || c.Index >= c.Count || c.Lo > c.Hi {
			return
		}
		for i := c.Lo; i < c.Hi; i++ {
			out[i] = int64(x[i])*3 + 1
		}
	})
})

// Dim is math.Dim, which is Go's on the device: Dim(Inf, Inf) is NaN
// (C's fdim gives 0; the differential fuzz target found it).
var Dim = offload.MustKernel3("dim", func(ctx offload.Ctx, a, b offload.In[float64], out offload.Out[float64]) {
	ctx.For(len(a), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = math.Dim(a[i], b[i])
		}
	})
})
