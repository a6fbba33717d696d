package core

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/plugin"
)

// afterKill bounds the wait for the work of killed devices to fail.
const afterKill = 5 * time.Second

// endWork is how Stop gets out of the work going on. It asks every kernel
// to stop (their Ctx's Done closes, plugin.Canceler), then waits for the
// tasks and the constructs that went on in the background, until ctx ends
// or the grace period (Config.StopGrace) passes. Work that is still going
// on then is ended by force where it can be: device processes are killed
// (plugin.Killer), which fails their pending work. A kernel running on a
// goroutine of this process (the host kind, the initial device) cannot be
// ended: its device is reported in stuck, not closed (its memory stays
// while the kernel may use it), and the error names it. The error also
// names every device killed.
func (r *Runtime) endWork(ctx context.Context) (stuck map[*Device]bool, err error) {
	for _, d := range r.Devices {
		if c, ok := d.Dev.(plugin.Canceler); ok && d.Dev != nil {
			c.CancelKernels()
		}
	}
	if r.Initial != nil && r.Initial.stop != nil {
		r.Initial.stop.Stop()
	}
	grace := r.Cfg.StopGrace // ConfigFromEnv read GOFFLOAD_STOP_GRACE
	if grace <= 0 {
		grace = config.DefaultStopGrace
	}
	gctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	werr := r.Taskwait(gctx)
	if gctx.Err() == nil {
		if werr != nil {
			r.Log.Printf(config.InfoOffload, -1, "a task ended with an error at Stop: %v", werr)
		}
		return nil, nil
	}
	why := fmt.Sprintf("work still going on %v after Stop asked its kernels to stop (GOFFLOAD_STOP_GRACE)", grace)
	if ctx.Err() != nil {
		why = fmt.Sprintf("work still going on when Stop's context ended (%v)", ctx.Err())
	}
	var msgs []string
	killed := false
	for d, ops := range r.running() {
		k, ok := d.Dev.(plugin.Killer)
		if !ok || d.Dev == nil {
			continue
		}
		k.Kill(fmt.Errorf("killed by Stop: %s", why))
		killed = true
		msgs = append(msgs, fmt.Sprintf("%s: killed (running %s)", d.Label(), strings.Join(ops, ", ")))
	}
	if killed {
		kctx, cancel := context.WithTimeout(context.Background(), afterKill)
		r.Taskwait(kctx) // the killed devices' work fails at once
		cancel()
	}
	cause := context.DeadlineExceeded
	if ctx.Err() != nil {
		cause = ctx.Err()
	}
	stuck = map[*Device]bool{}
	for d, ops := range r.running() {
		stuck[d] = true
		if a, ok := d.Dev.(plugin.Abandoner); ok && d.Dev != nil {
			a.Abandon(fmt.Errorf("abandoned by Stop: %w: %s", cause, why))
		}
		msgs = append(msgs, fmt.Sprintf("%s: still running %s (a kernel on a goroutine of this process cannot be killed: it goes on until it returns, its device is not closed, its tasks fail as abandoned and nothing after it copies to the program's memory)", d.Label(), strings.Join(ops, ", ")))
	}
	r.abandon(stuck, cause, why)
	slices.Sort(msgs)
	return stuck, Errorf("goffload: Stop: %w: %s: %s", cause, why, strings.Join(msgs, "; "))
}

// abandon completes the tasks still live on the devices of stuck with an
// error that says Stop gave up on them (wrapping cause and
// plugin.ErrDeviceLost), so that their Wait returns it at once; their
// work's own end, whenever it comes, changes nothing then (completeNext),
// and their devices ran nothing after the kernel (plugin.Abandoner). Host
// work and kernels of the initial device run on the program's memory:
// their tasks fail the same way, but what they write themselves they
// write.
func (r *Runtime) abandon(stuck map[*Device]bool, cause error, why string) {
	ts := &r.tasks
	ts.mu.Lock()
	var live []*Task
	for t := range ts.live {
		d := t.dev
		if d == nil {
			d = r.Initial
		}
		if stuck[d] {
			live = append(live, t)
		}
	}
	ts.mu.Unlock()
	slices.SortFunc(live, func(a, b *Task) int { return cmp.Compare(a.ID, b.ID) })
	for _, t := range live {
		where := "host work"
		if t.dev != nil {
			where = t.dev.Label()
		}
		r.complete(t, Errorf("goffload: %s: task %d (%s) abandoned by Stop: %w: %w (%s): nothing it copies back reaches the program's memory",
			where, t.ID, t.Name, plugin.ErrDeviceLost, cause, why), nil)
	}
}

// running returns the devices with work still going on, and what: the
// synchronous constructs that went on in the background, and the tasks
// not completed (host work counts on the initial device).
func (r *Runtime) running() map[*Device][]string {
	out := map[*Device][]string{}
	all := append(slices.Clone(r.Devices), r.Initial)
	for _, d := range all {
		if d == nil {
			continue
		}
		d.bgmu.Lock()
		for c, op := range d.bg {
			select {
			case <-c:
			default:
				out[d] = append(out[d], op)
			}
		}
		d.bgmu.Unlock()
	}
	ts := &r.tasks
	ts.mu.Lock()
	for t := range ts.live {
		d := t.dev
		if d == nil {
			d = r.Initial
		}
		if d != nil {
			name := t.Name
			if name == "" {
				name = fmt.Sprintf("task %d", t.ID)
			}
			out[d] = append(out[d], "task "+strings.TrimPrefix(name, "task "))
		}
	}
	ts.mu.Unlock()
	for d := range out {
		slices.Sort(out[d])
		out[d] = slices.Compact(out[d])
	}
	return out
}

// constructStop returns the stop signal of a synchronous construct bound
// to ctx: its kernels' Ctx.Done closes when ctx ends. nil when ctx never
// ends. release ends the binding once the construct is over (or has gone
// on in the background: ctx ended, and the signal stopped).
func constructStop(ctx context.Context) (*plugin.StopSignal, func()) {
	if ctx == nil || ctx.Done() == nil {
		return nil, func() {}
	}
	s := plugin.NewStopSignal()
	stop := context.AfterFunc(ctx, s.Stop)
	return s, func() {
		// A construct that went on in the background returns as soon as
		// ctx is done, which can be before ctx runs its AfterFuncs: stop
		// would then cancel the one that tells the kernel. Stop it here.
		if !stop() || ctx.Err() != nil {
			s.Stop()
		}
	}
}
