package cg

import (
	"context"
	"fmt"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/reduction"
)

// The slots of a recorded solve's state, a buffer that stays on the device:
// the step sizes are made there from the dot products, so that an
// iteration needs nothing from the host and can be a replayed graph.
const (
	sRR     = iota // r·r
	sPQ            // p·Ap of the iteration
	sRRNew         // r·r after the iteration's update
	sIter          // the iterations done
	sBroken        // 0, or 1 + the iteration whose step size was not a finite number
	sWhat          // which step size that was: 1 alpha, 2 beta
	sBeta          // beta of the iteration, for XPAYS
	stateLen
)

// The kernels of a recorded iteration: SpMVDot, Update and XPAY with the
// step sizes read from and the dot products written to the state s. Once
// an iteration breaks down (a step size that is not finite) they do
// nothing: x stays as the last good iteration left it, and SolveRecorded
// reports the breakdown.
var (
	// SpMVDotS computes q = A p and s[sPQ] = p·q.
	SpMVDotS = offload.MustKernel6("cg.spmvdot_s", func(ctx offload.Ctx, rowPtr, col offload.In[int32], val, p offload.In[float64], q offload.Out[float64], s offload.InOut[float64]) {
		if s[sBroken] != 0 {
			return
		}
		s[sPQ] = offload.Reduce(ctx, len(q), reduction.Sum[float64](), func(lo, hi int, acc float64) float64 {
			return spmvDot(rowPtr, col, val, p, q, lo, hi, acc)
		})
	}).Named("rowptr", "col", "val", "p", "q", "s")

	// UpdateS computes alpha = s[sRR] / s[sPQ], x += alpha p, r -= alpha q
	// and r·r (new), and then the next step size, beta = r·r (new) / r·r,
	// into s[sBeta]; r·r (new) becomes s[sRR], and the iteration is
	// counted. (The state is written after the Reduce, on one work-item.)
	UpdateS = offload.MustKernel5("cg.update_s", func(ctx offload.Ctx, p, q offload.In[float64], x, r offload.InOut[float64], s offload.InOut[float64]) {
		alpha := s[sRR] / s[sPQ]
		ok := s[sBroken] == 0 && alpha-alpha == 0 // alpha is not NaN nor ±Inf
		rrNew := offload.Reduce(ctx, len(r), reduction.Sum[float64](), func(lo, hi int, acc float64) float64 {
			if !ok {
				return acc
			}
			return update(alpha, p, q, x, r, lo, hi, acc)
		})
		if s[sBroken] != 0 {
			return
		}
		if !ok {
			s[sBroken] = s[sIter] + 1
			s[sWhat] = 1
			return
		}
		s[sRRNew] = rrNew
		beta := rrNew / s[sRR]
		if beta-beta != 0 {
			s[sBroken] = s[sIter] + 1
			s[sWhat] = 2
			return
		}
		s[sBeta] = beta
		s[sRR] = rrNew
		s[sIter] = s[sIter] + 1
	}).Named("p", "q", "x", "r", "s")

	// XPAYS computes p = r + beta p with UpdateS's beta.
	XPAYS = offload.MustKernel3("cg.xpay_s", func(ctx offload.Ctx, r offload.In[float64], p offload.InOut[float64], s offload.In[float64]) {
		if s[sBroken] != 0 {
			return
		}
		beta := s[sBeta]
		ctx.For(len(p), func(lo, hi int) { xpay(beta, r, p, lo, hi) })
	}).Named("r", "p", "s")
)

// SolveRecorded is Solve with the iteration recorded once as an
// offload.Taskgraph and replayed: its three kernels make the step sizes on
// the device (SpMVDotS, UpdateS, XPAYS), so no number comes back between
// iterations and the host does not wait for one. Each replay is one
// message to a device process; the iterations are queued at once and the
// host waits for the last. The time is from the record to the last
// iteration's end. A breakdown is the same error as Solve's, found when
// the iterations are done.
func SolveRecorded(dev offload.Device, n, iters int) ([]float64, time.Duration, error) {
	if err := CheckSize(n, iters); err != nil {
		return nil, 0, err
	}
	m := Poisson(n)
	x, r, p, rr := start(n)
	q := make([]float64, len(x))
	s := make([]float64, stateLen)
	s[sRR] = rr
	sy := &mapped{m: m, x: x, r: r, p: p, q: q, s: s}
	if err := sy.enter(dev); err != nil {
		return nil, 0, err
	}
	defer sy.drop(dev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	if iters > 0 {
		tg := offload.NewTaskgraph(func(rec *offload.Recorder) error {
			on := func() offload.Async { return rec.Nowait(dev, offload.DependInOut(s)) }
			SpMVDotS.Nowait(on(), m.RowPtr, m.Col, m.Val, p, q, s)
			UpdateS.Nowait(on(), p, q, x, r, s)
			XPAYS.Nowait(on(), r, p, s)
			return nil
		})
		defer tg.Reset() // the graph's parts on the device go
		var last *offload.Task
		for it := range iters {
			if it == 0 {
				last = tg.Run()
			} else {
				last = tg.Replay()
			}
		}
		if err := last.WaitContext(ctx); err != nil {
			return nil, 0, fmt.Errorf("cg: recorded iterations: %w", err)
		}
	}
	elapsed := time.Since(t0)
	if err := sy.exit(dev); err != nil {
		return nil, 0, err
	}
	if b := s[sBroken]; b != 0 {
		it := int(b) - 1
		_, err := step("alpha = r·r / p·Ap", s[sRR], s[sPQ], it)
		if s[sWhat] == 2 {
			_, err = step("beta = r·r (new) / r·r", s[sRRNew], s[sRR], it)
		}
		if err == nil { // the device's division was not the host's
			err = fmt.Errorf("%w: iteration %d: the device found a step size that is not finite (state %v)", ErrBreakdown, it, s)
		}
		return nil, 0, err
	}
	if got := int(s[sIter]); got != iters {
		return nil, 0, fmt.Errorf("cg: the device did %d iterations, want %d", got, iters)
	}
	return x, elapsed, nil
}
