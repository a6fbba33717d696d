package offload_test

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/reduction"
)

// reduceBest is an argmax: the largest value and the first index holding it.
type reduceBest struct {
	Value float64
	Index int64
}

// argmax is a user-defined reduction (declare reduction): on equal values
// it keeps a, the earlier chunk's, so the first index wins.
var argmax = reduction.Op[reduceBest]{
	Identity: reduceBest{Value: math.Inf(-1), Index: -1},
	Combine: func(a, b reduceBest) reduceBest {
		if b.Value > a.Value {
			return b
		}
		return a
	},
}

// reduceHist is an array reduction, OpenMP's reduction(+: hist[0:4]).
type reduceHist [4]int64

var histSum = reduction.Op[reduceHist]{Combine: func(a, b reduceHist) reduceHist {
	for i := range a {
		a[i] += b[i]
	}
	return a
}}

// reduceResults holds every reduction of reduce.all over x.
type reduceResults struct {
	Sum, Prod, Min, Max int64
	Min8, Max8          int8
	MinU, MaxU          uint16
	FSum, FMin, FMax    float64
	F32Min, F32Max      float32
	And, Or, Xor        uint64
	All, Any            bool
	Best                reduceBest
	Hist                reduceHist
	Chunks, Cores       int64
}

// reduceAll computes the reductions of x over [lo, hi) into acc, element by
// element: what a sequential loop does, and what each chunk does.
func reduceAll(x []int64, lo, hi int, acc reduceResults) reduceResults {
	for i := lo; i < hi; i++ {
		v := x[i]
		acc.Sum += v
		acc.Prod *= (v%3+3)%3*2 + 1 // 1, 3 or 5: wraps, never 0, still associative
		acc.Min = min(acc.Min, v)
		acc.Max = max(acc.Max, v)
		acc.Min8 = min(acc.Min8, int8(v))
		acc.Max8 = max(acc.Max8, int8(v))
		acc.MinU = min(acc.MinU, uint16(v))
		acc.MaxU = max(acc.MaxU, uint16(v))
		f := float64(v) // integers: every grouping sums exactly
		acc.FSum += f
		acc.FMin = min(acc.FMin, f)
		acc.FMax = max(acc.FMax, f)
		acc.F32Min = min(acc.F32Min, float32(v))
		acc.F32Max = max(acc.F32Max, float32(v))
		acc.And &= uint64(v) | 1<<62
		acc.Or |= uint64(v) & 0xff
		acc.Xor ^= uint64(v)
		acc.All = acc.All && v != 0
		acc.Any = acc.Any || v == 999
		if f > acc.Best.Value {
			acc.Best = reduceBest{f, int64(i)}
		}
		acc.Hist[(v%4+4)%4]++
	}
	return acc
}

// reduceOps is every Op of reduceResults, field by field.
var reduceOps = reduction.Op[reduceResults]{
	Identity: reduceResults{
		Sum: reduction.Sum[int64]().Identity, Prod: reduction.Prod[int64]().Identity,
		Min: reduction.Min[int64]().Identity, Max: reduction.Max[int64]().Identity,
		Min8: reduction.Min[int8]().Identity, Max8: reduction.Max[int8]().Identity,
		MinU: reduction.Min[uint16]().Identity, MaxU: reduction.Max[uint16]().Identity,
		FSum: reduction.Sum[float64]().Identity,
		FMin: reduction.Min[float64]().Identity, FMax: reduction.Max[float64]().Identity,
		F32Min: reduction.Min[float32]().Identity, F32Max: reduction.Max[float32]().Identity,
		And: reduction.BitAnd[uint64]().Identity, Or: reduction.BitOr[uint64]().Identity, Xor: reduction.BitXor[uint64]().Identity,
		All: reduction.LogicalAnd().Identity, Any: reduction.LogicalOr().Identity,
		Best: argmax.Identity, Hist: histSum.Identity,
	},
	Combine: func(a, b reduceResults) reduceResults {
		return reduceResults{
			Sum: reduction.Sum[int64]().Combine(a.Sum, b.Sum), Prod: reduction.Prod[int64]().Combine(a.Prod, b.Prod),
			Min: reduction.Min[int64]().Combine(a.Min, b.Min), Max: reduction.Max[int64]().Combine(a.Max, b.Max),
			Min8: reduction.Min[int8]().Combine(a.Min8, b.Min8), Max8: reduction.Max[int8]().Combine(a.Max8, b.Max8),
			MinU: reduction.Min[uint16]().Combine(a.MinU, b.MinU), MaxU: reduction.Max[uint16]().Combine(a.MaxU, b.MaxU),
			FSum: reduction.Sum[float64]().Combine(a.FSum, b.FSum),
			FMin: reduction.Min[float64]().Combine(a.FMin, b.FMin), FMax: reduction.Max[float64]().Combine(a.FMax, b.FMax),
			F32Min: reduction.Min[float32]().Combine(a.F32Min, b.F32Min), F32Max: reduction.Max[float32]().Combine(a.F32Max, b.F32Max),
			And: reduction.BitAnd[uint64]().Combine(a.And, b.And), Or: reduction.BitOr[uint64]().Combine(a.Or, b.Or),
			Xor: reduction.BitXor[uint64]().Combine(a.Xor, b.Xor),
			All: reduction.LogicalAnd().Combine(a.All, b.All), Any: reduction.LogicalOr().Combine(a.Any, b.Any),
			Best: argmax.Combine(a.Best, b.Best), Hist: histSum.Combine(a.Hist, b.Hist),
		}
	},
}

var (
	// reduce.all runs every reduction over x in one loop and overwrites
	// out[0] (mapped from).
	reduceAllKernel = offload.MustKernel("reduce.all", func(ctx offload.Ctx, x []int64, out []reduceResults) {
		r := offload.Reduce(ctx, len(x), reduceOps, func(lo, hi int, acc reduceResults) reduceResults {
			return reduceAll(x, lo, hi, acc)
		})
		r.Chunks, r.Cores = int64(ctx.Chunks(len(x))), int64(ctx.Cores())
		out[0] = r
	})
	// reduce.into combines the sum and the minimum with out's values
	// (mapped tofrom), as reduction(+:sum) and reduction(min:m) do.
	reduceInto = offload.MustKernel("reduce.into", func(ctx offload.Ctx, x []int64, out []int64) {
		sum, lo := reduction.Sum[int64](), reduction.Min[int64]()
		s := offload.Reduce(ctx, len(x), sum, func(l, h int, acc int64) int64 {
			for _, v := range x[l:h] {
				acc += v
			}
			return acc
		})
		m := offload.Reduce(ctx, len(x), lo, func(l, h int, acc int64) int64 {
			for _, v := range x[l:h] {
				acc = min(acc, v)
			}
			return acc
		})
		out[0] = sum.Combine(out[0], s)
		out[1] = lo.Combine(out[1], m)
	})
	// reduce.fsum sums x in the chunks' grouping.
	reduceFSum = offload.MustKernel("reduce.fsum", func(ctx offload.Ctx, x []float64, out []float64) {
		out[0] = offload.Reduce(ctx, len(x), reduction.Sum[float64](), func(lo, hi int, acc float64) float64 {
			for _, v := range x[lo:hi] {
				acc += v
			}
			return acc
		})
	})
	// reduce.chunks records, for a loop of n, each chunk's range and how
	// often it ran, how often each index ran, the ranges For passes, and
	// Chunks(n) and Cores().
	reduceChunks = offload.MustKernel("reduce.chunks", func(ctx offload.Ctx, n int64, meta, runs, los, his, cover, forLos, forHis []int64) {
		meta[0], meta[1] = int64(ctx.Chunks(int(n))), int64(ctx.Cores())
		ctx.ForChunks(int(n), func(c offload.Chunk) {
			if c.Count != ctx.Chunks(int(n)) {
				atomic.AddInt64(&meta[2], 1)
			}
			atomic.AddInt64(&runs[c.Index], 1)
			los[c.Index], his[c.Index] = int64(c.Lo), int64(c.Hi)
			for i := c.Lo; i < c.Hi; i++ {
				atomic.AddInt64(&cover[i], 1)
			}
		})
		ctx.For(int(n), func(lo, hi int) {
			slot := atomic.AddInt64(&meta[3], 1) - 1
			forLos[slot], forHis[slot] = int64(lo), int64(hi)
		})
	})
	// reduce.cores reports the device's Cores().
	reduceCores = offload.MustKernel("reduce.cores", func(ctx offload.Ctx, out []int64) { out[0] = int64(ctx.Cores()) })
)

// reduceDevices starts a host device with 5 cores, a device process with 3
// and the initial device (as many cores as CPUs), and returns them with
// their names.
func reduceDevices(t *testing.T) map[string]offload.Device {
	t.Setenv("GOFFLOAD_HOST_CORES", "5")
	t.Setenv("GOFFLOAD_DEVICE_CORES", "3")
	start(t, offload.WithDevices("host,local"))
	return map[string]offload.Device{"host": offload.On(0), "local": offload.On(1), "initial": offload.Initial()}
}

func deviceCores(t *testing.T, d offload.Device) int {
	t.Helper()
	out := []int64{0}
	if err := d.Run(reduceCores, offload.From(out)); err != nil {
		t.Fatalf("reduce.cores: %v", err)
	}
	return int(out[0])
}

// reduceInput is n values from -999 to 999, with repeats (ties for argmax)
// and zeros, and 999 at the end (and maybe before) when n > 100.
func reduceInput(n int) []int64 {
	x := make([]int64, n)
	s := uint64(12345)
	for i := range x {
		s = s*6364136223846793005 + 1442695040888963407
		x[i] = int64(s>>33)%1999 - 1000 + 1 // -999 … 999
	}
	if n > 100 {
		x[n-1] = 999
	}
	return x
}

// chunkBounds is chunk c of k over [0, n) as Ctx documents it.
func chunkBounds(n, k, c int) (lo, hi int) {
	q, r := n/k, n%k
	lo = c*q + min(c, r)
	hi = lo + q
	if c < r {
		hi++
	}
	return lo, hi
}

func reduceSizes(cores int) []int {
	return slices.Compact([]int{0, 1, max(cores-1, 0), cores, cores + 1, 7*cores + 3, 100_003})
}

func TestReduce(t *testing.T) {
	for name, d := range reduceDevices(t) {
		cores := deviceCores(t, d)
		for _, n := range reduceSizes(cores) {
			t.Run(fmt.Sprintf("%s/cores=%d/n=%d", name, cores, n), func(t *testing.T) {
				x := reduceInput(n)
				out := []reduceResults{{Sum: 7}}
				if err := d.Run(reduceAllKernel, offload.To(x), offload.From(out)); err != nil {
					t.Fatal(err)
				}
				want := reduceAll(x, 0, n, reduceOps.Identity)
				want.Chunks, want.Cores = int64(min(n, cores)), int64(cores)
				if got := out[0]; got != want {
					t.Errorf("got  %+v\nwant %+v", got, want)
				}
				if first := slices.Index(x, 999); n > 100 && (out[0].Best != reduceBest{999, int64(first)} || !out[0].Any) {
					t.Errorf("argmax %+v, any %v: want 999 at its first index %d", out[0].Best, out[0].Any, first)
				}
				if n == 0 && out[0].Best != argmax.Identity {
					t.Errorf("n=0: argmax %+v, want the identity", out[0].Best)
				}
			})
		}
	}
}

// TestReduceInto: the result combines with the output's value before the
// kernel, as OpenMP's reduction does with the original variable.
func TestReduceInto(t *testing.T) {
	for name, d := range reduceDevices(t) {
		for _, n := range []int{0, 1, 1000} {
			x := reduceInput(n)
			out := []int64{100, -5000}
			if err := d.Run(reduceInto, offload.To(x), offload.ToFrom(out)); err != nil {
				t.Fatal(err)
			}
			var sum int64 = 100
			m := int64(-5000)
			for _, v := range x {
				sum += v
				m = min(m, v)
			}
			if out[0] != sum || out[1] != m {
				t.Errorf("%s n=%d: got sum %d min %d, want %d %d", name, n, out[0], out[1], sum, m)
			}
			out = []int64{100, 5000}
			if err := d.Run(reduceInto, offload.To(x), offload.ToFrom(out)); err != nil {
				t.Fatal(err)
			}
			if want := min(5000, slices.Min(append([]int64{5000}, x...))); out[1] != want {
				t.Errorf("%s n=%d: min %d, want %d", name, n, out[1], want)
			}
		}
	}
}

// TestReduceFloatGrouping: a floating-point sum is the chunks' partial sums
// added in chunk order, bit for bit, on every run.
func TestReduceFloatGrouping(t *testing.T) {
	for name, d := range reduceDevices(t) {
		cores := deviceCores(t, d)
		for _, n := range reduceSizes(cores) {
			x := make([]float64, n)
			for i := range x {
				x[i] = 1 / float64(i+3) * math.Pow(-1.5, float64(i%40))
			}
			var want float64
			if k := min(n, cores); k > 0 {
				parts := make([]float64, k)
				for c := range k {
					lo, hi := chunkBounds(n, k, c)
					for _, v := range x[lo:hi] {
						parts[c] += v
					}
				}
				want = parts[0]
				for _, p := range parts[1:] {
					want += p
				}
			}
			for range 3 {
				out := []float64{math.NaN()}
				if err := d.Run(reduceFSum, offload.To(x), offload.From(out)); err != nil {
					t.Fatal(err)
				}
				if math.Float64bits(out[0]) != math.Float64bits(want) {
					t.Fatalf("%s n=%d: sum %v (%#x), want %v (%#x)", name, n, out[0], math.Float64bits(out[0]), want, math.Float64bits(want))
				}
			}
		}
	}
}

// TestForChunks: the chunks of a loop of n are numbered 0 to Chunks(n)-1,
// each runs once over its range as Ctx documents it, the ranges cover
// [0, n) once, and For passes the same ranges.
func TestForChunks(t *testing.T) {
	for name, d := range reduceDevices(t) {
		cores := deviceCores(t, d)
		for _, n := range reduceSizes(cores) {
			t.Run(fmt.Sprintf("%s/cores=%d/n=%d", name, cores, n), func(t *testing.T) {
				meta := make([]int64, 4)
				runs, los, his := make([]int64, cores), make([]int64, cores), make([]int64, cores)
				forLos, forHis := make([]int64, cores), make([]int64, cores)
				cover := make([]int64, n)
				err := d.Run(reduceChunks, int64(n), offload.ToFrom(meta), offload.ToFrom(runs), offload.ToFrom(los), offload.ToFrom(his),
					offload.ToFrom(cover), offload.ToFrom(forLos), offload.ToFrom(forHis))
				if err != nil {
					t.Fatal(err)
				}
				k := min(n, cores)
				if meta[0] != int64(k) || meta[1] != int64(cores) || meta[2] != 0 || meta[3] != int64(k) {
					t.Fatalf("Chunks %d, Cores %d, %d chunks with a wrong Count, For ran %d chunks; want %d, %d, 0, %d", meta[0], meta[1], meta[2], meta[3], k, cores, k)
				}
				next := int64(0)
				for c := range cores {
					if c >= k {
						if runs[c] != 0 {
							t.Errorf("chunk %d of %d ran", c, k)
						}
						continue
					}
					lo, hi := chunkBounds(n, k, c)
					if runs[c] != 1 || los[c] != next || los[c] != int64(lo) || his[c] != int64(hi) {
						t.Errorf("chunk %d: ran %d times over [%d, %d), want once over [%d, %d)", c, runs[c], los[c], his[c], lo, hi)
					}
					if size := his[c] - los[c]; size != int64(n/k) && size != int64(n/k+1) {
						t.Errorf("chunk %d has %d elements (n=%d, %d chunks)", c, size, n, k)
					}
					next = his[c]
				}
				if next != int64(n) {
					t.Errorf("chunks end at %d, want %d", next, n)
				}
				for i, c := range cover {
					if c != 1 {
						t.Fatalf("index %d ran %d times", i, c)
					}
				}
				type span struct{ lo, hi int64 }
				var got, want []span
				for c := range k {
					got = append(got, span{forLos[c], forHis[c]})
					want = append(want, span{los[c], his[c]})
				}
				slices.SortFunc(got, func(a, b span) int { return int(a.lo - b.lo) })
				if !slices.Equal(got, want) {
					t.Errorf("For ran %v, ForChunks %v", got, want)
				}
			})
		}
	}
}
