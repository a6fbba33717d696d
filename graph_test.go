package offload_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload"
)

// Mix is dst[i] = dst[i]*3 + src[i] + v: its result depends on the order
// of the tasks on dst and src, and on its scalar.
var Mix = offload.MustKernel3("graph.mix", func(_ offload.Ctx, v int32, dst offload.InOut[int32], src offload.In[int32]) {
	for i := range dst {
		dst[i] = dst[i]*3 + src[i] + v
	}
})

// AddN is AddTo as a typed kernel: x[i] += v.
var AddN = offload.MustKernel2("graph.addn", func(_ offload.Ctx, v int32, x offload.InOut[int32]) {
	for i := range x {
		x[i] += v
	}
})

// SubN is x[i] -= v: another kernel of AddN's type.
var SubN = offload.MustKernel2("graph.subn", func(_ offload.Ctx, v int32, x offload.InOut[int32]) {
	for i := range x {
		x[i] -= v
	}
})

// gop is one task of a random graph: a kernel on a device over buffers,
// or a copy of a buffer between two devices.
type gop struct {
	kind     int // 0: AddN, 1: Mix, 2: copy from dev to to, 3: update from dev, 4: update to dev
	dev, to  int
	dst, src int   // buffers
	scale    int32 // the scalar is scale*iteration + dst
}

// randomGraph makes n tasks over nb buffers on nd devices.
func randomGraph(rng *rand.Rand, n, nb, nd int) []gop {
	ops := make([]gop, n)
	for i := range ops {
		o := gop{kind: rng.IntN(5), dev: rng.IntN(nd), dst: rng.IntN(nb), src: rng.IntN(nb), scale: int32(rng.IntN(5))}
		if o.kind == 2 {
			o.to = (o.dev + 1 + rng.IntN(nd-1)) % nd
		}
		if o.kind == 1 && o.src == o.dst {
			o.src = (o.dst + 1) % nb
		}
		ops[i] = o
	}
	return ops
}

// build makes ops's tasks on bufs with nowait (Device.Nowait, or a
// Recorder's), the scalars from iteration it.
func build(ops []gop, bufs [][]int32, it int32, nowait func(d offload.Device, deps ...offload.Dep) offload.Async) {
	for _, o := range ops {
		d := offload.On(o.dev)
		switch o.kind {
		case 0:
			AddN.Nowait(nowait(d, offload.DependInOut(bufs[o.dst])), o.scale*it+int32(o.dst), bufs[o.dst])
		case 1:
			Mix.Nowait(nowait(d, offload.DependInOut(bufs[o.dst]), offload.DependIn(bufs[o.src])), o.scale*it-int32(o.src), bufs[o.dst], bufs[o.src])
		case 2:
			// The buffer's copy on to takes its copy on dev: both are
			// named by the host address, so the copy is inout on it.
			offload.CopyNowait(nowait(d, offload.DependInOut(bufs[o.dst])), offload.On(o.to), bufs[o.dst], d, bufs[o.dst])
		case 3:
			nowait(d, offload.DependInOut(bufs[o.dst])).Update(offload.From(bufs[o.dst]))
		case 4:
			nowait(d, offload.DependInOut(bufs[o.dst])).Update(offload.To(bufs[o.dst]))
		}
	}
}

// mapAll maps each buffer of bufs on devices 0 to nd-1, unmapped at the
// test's end.
func mapAll(t *testing.T, bufs [][]int32, nd int) {
	t.Helper()
	for d := range nd {
		for _, b := range bufs {
			if err := offload.On(d).EnterData(offload.To(b)); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for d := range nd {
			for _, b := range bufs {
				_ = offload.On(d).ExitData(offload.Delete(b))
			}
		}
	})
}

// snapshot is every buffer's copy on every device, then in the
// program's memory.
func snapshot(t *testing.T, bufs [][]int32, nd int) [][]int32 {
	t.Helper()
	var out [][]int32
	for d := range nd {
		for _, b := range bufs {
			out = append(out, deviceCopy(t, offload.On(d), b))
		}
	}
	for _, b := range bufs {
		out = append(out, slices.Clone(b))
	}
	return out
}

func newBufs(nb, n int, seed int32) [][]int32 {
	bufs := make([][]int32, nb)
	for i := range bufs {
		bufs[i] = make([]int32, n)
		for j := range bufs[i] {
			bufs[i][j] = seed + int32(i*n+j)
		}
	}
	return bufs
}

// setContents writes new contents into bufs and onto every device: the
// contents may change between replays.
func setContents(t *testing.T, bufs [][]int32, nd int, v int32) {
	t.Helper()
	for i, b := range bufs {
		for j := range b {
			b[j] = v*7 + int32(i-j)
		}
		for d := range nd {
			if err := offload.On(d).Update(offload.To(b)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestTaskgraphRandom records random graphs of kernels and copies over
// buffers on two devices, and replays them with new scalars and new
// contents, against the same tasks run afresh on buffers of their own.
//
// The tcp case is two sessions with one tcp:// device process: they are
// siblings, linked inside the process, so an edge between them waits on
// the device (two processes have no link, and a graph refuses edges that
// would wait on the host).
func TestTaskgraphRandom(t *testing.T) {
	for _, devs := range []string{"host:2", "local:2", "tcp"} {
		t.Run(devs, func(t *testing.T) {
			if devs == "tcp" {
				startTCPDevice(t)
				devs = tcpSpec(2)
			}
			start(t, offload.WithDevices(devs), offload.WithOffload("MANDATORY"))
			const nd, nb, n = 2, 4, 64
			graphs, tasks := 6, 40
			if !strings.HasPrefix(devs, "host") {
				graphs = 3
			}
			for seed := range graphs {
				rng := rand.New(rand.NewPCG(uint64(seed), 44))
				ops := randomGraph(rng, tasks, nb, nd)
				fresh, rec := newBufs(nb, n, 1), newBufs(nb, n, 1)
				mapAll(t, fresh, nd)
				mapAll(t, rec, nd)
				var it int32
				tg := offload.NewTaskgraph(func(r *offload.Recorder) error {
					build(ops, rec, it, r.Nowait)
					return nil
				})
				for it = range 4 {
					if it == 2 {
						setContents(t, fresh, nd, it)
						setContents(t, rec, nd, it)
					}
					if got, want := tg.Recorded(), it > 0; got != want {
						t.Fatalf("graph %d, run %d: Recorded() = %v, want %v", seed, it, got, want)
					}
					// Run (a record, then replays with the new scalars),
					// then Replay (the same scalars, the function not
					// called), each against a fresh run.
					for _, again := range []bool{false, true} {
						build(ops, fresh, it, offload.Device.Nowait)
						var task *offload.Task
						if again {
							task = tg.Replay()
						} else {
							task = tg.Run()
						}
						if err := task.Wait(); err != nil {
							t.Fatalf("graph %d, run %d (Replay %v): %v", seed, it, again, err)
						}
						if err := offload.Taskwait(context.Background()); err != nil {
							t.Fatalf("graph %d, run %d: Taskwait: %v", seed, it, err)
						}
						want, got := snapshot(t, fresh, nd), snapshot(t, rec, nd)
						for i := range want {
							if !slices.Equal(got[i], want[i]) {
								t.Fatalf("graph %d, run %d (replay: %v, Replay: %v): device %d (%d: the program's memory) buffer %d:\n got %v\nwant %v", seed, it, it > 0, again, i/nb, nd, i%nb, got[i][:8], want[i][:8])
							}
						}
					}
				}
			}
		})
	}
}

// TestTaskgraphRules: a replay that breaks a rule fails with
// ErrGraphChanged and runs nothing; what cannot be recorded is refused
// at the record, with an error that says what.
func TestTaskgraphRules(t *testing.T) {
	start(t, offload.WithDevices("host:2"), offload.WithOffload("MANDATORY"))
	x, y := filled(16, 1), filled(16, 2)
	mapAll(t, [][]int32{x, y}, 2)
	dev := offload.On(0)
	buf, v, tasks, kernel, on := x, int32(1), 1, AddN, x
	tg := offload.NewTaskgraph(func(r *offload.Recorder) error {
		for range tasks {
			kernel.Nowait(r.Nowait(dev, offload.DependInOut(on)), v, buf)
		}
		return nil
	})
	if err := tg.Run().Wait(); err != nil {
		t.Fatal(err)
	}
	if err := tg.Run().Wait(); err != nil {
		t.Fatal(err)
	}
	if got := deviceCopy(t, dev, x); !allEqual(got, 3) {
		t.Fatalf("after a record and a replay: %v, want 3s", got)
	}
	broken := func(name string, undo func()) {
		t.Helper()
		err := tg.Run().Wait()
		undo()
		if !errors.Is(err, offload.ErrGraphChanged) {
			t.Errorf("%s: %v, want ErrGraphChanged", name, err)
		}
		if got := deviceCopy(t, dev, x); !allEqual(got, 3) {
			t.Errorf("%s: x on the device is %v: a broken replay ran", name, got)
		}
	}
	buf = y
	broken("another buffer", func() { buf = x })
	buf = x[:8]
	broken("another length", func() { buf = x })
	tasks = 2
	broken("another number of tasks", func() { tasks = 1 })
	kernel = SubN
	broken("another kernel", func() { kernel = AddN })
	dev = offload.On(1)
	broken("another device", func() { dev = offload.On(0) })
	on = y
	broken("another depend clause", func() { on = x })
	kernel = AddN.With(offload.ToFrom(x))
	broken("a With clause", func() { kernel = AddN })

	// x unmapped and mapped again: another mapping, whatever its address.
	if err := dev.ExitData(offload.From(x)); err != nil {
		t.Fatal(err)
	}
	if err := dev.EnterData(offload.To(x)); err != nil {
		t.Fatal(err)
	}
	broken("x mapped again", func() {})
	tg.Reset()
	if err := tg.Run().Wait(); err != nil {
		t.Fatalf("record after Reset: %v", err)
	}
	if got := deviceCopy(t, dev, x); !allEqual(got, 4) {
		t.Fatalf("after Reset's record: %v, want 4s", got)
	}

	if err := offload.NewTaskgraph(func(*offload.Recorder) error { return nil }).Replay().Wait(); err == nil || !strings.Contains(err.Error(), "not recorded") {
		t.Errorf("Replay before a record: %v, want an error saying it is not recorded", err)
	}

	// Refused at the record.
	z := filled(16, 0) // mapped nowhere
	for _, c := range []struct {
		name string
		fn   func(r *offload.Recorder)
		want string
	}{
		{"not present", func(r *offload.Recorder) { AddN.Nowait(r.Nowait(dev), 1, z) }, "mapped before the graph"},
		{"always", func(r *offload.Recorder) {
			AddN.With(offload.ToFrom(x).Always()).Nowait(r.Nowait(dev), 1, x)
		}, "always"},
		{"EnterData", func(r *offload.Recorder) { r.Nowait(dev).EnterData(offload.To(z)) }, "not EnterData"},
		{"Go", func(r *offload.Recorder) { r.Nowait(dev).Go("host", func() error { return nil }) }, "not EnterData"},
		{"initial device", func(r *offload.Recorder) { AddN.Nowait(r.Nowait(offload.Initial()), 1, x) }, "initial"},
	} {
		g := offload.NewTaskgraph(func(r *offload.Recorder) error { c.fn(r); return nil })
		err := g.Run().Wait()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
		if g.Recorded() {
			t.Errorf("%s: recorded", c.name)
		}
	}
	// A Run from the graph's own function would wait for itself.
	var self *offload.Taskgraph
	var inner error
	self = offload.NewTaskgraph(func(r *offload.Recorder) error { inner = self.Run().Wait(); return nil })
	if err := self.Run().Wait(); err != nil || inner == nil || !strings.Contains(inner.Error(), "own function") {
		t.Errorf("Run from the graph's function: %v (the outer Run: %v), want an error saying so", inner, err)
	}
	// The function's own error fails the record.
	fail := fmt.Errorf("the function's own")
	g := offload.NewTaskgraph(func(r *offload.Recorder) error { return fail })
	if err := g.Run().Wait(); !errors.Is(err, fail) {
		t.Errorf("a failing function's record: %v, want its error", err)
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Errorf("Taskwait: %v", err)
	}
}

// TestTaskgraphAllocs measures the heap allocations of a nowait task on
// present buffers, made afresh and replayed (issue 44's yardstick), and
// checks that a replayed task allocates less than a fresh one.
func TestTaskgraphAllocs(t *testing.T) {
	start(t, offload.WithDevices("host:2"), offload.WithOffload("MANDATORY"))
	x := filled(16, 0)
	mapAll(t, [][]int32{x}, 1)
	dev := offload.On(0)
	v := int32(1)
	fresh := testing.AllocsPerRun(200, func() {
		if err := AddN.Nowait(dev.Nowait(offload.DependInOut(x)), v, x).Wait(); err != nil {
			t.Fatal(err)
		}
	})
	const n = 100
	tg := offload.NewTaskgraph(func(r *offload.Recorder) error {
		for range n {
			AddN.Nowait(r.Nowait(dev, offload.DependInOut(x)), v, x)
		}
		return nil
	})
	if err := tg.Run().Wait(); err != nil {
		t.Fatal(err)
	}
	replay := testing.AllocsPerRun(50, func() {
		v++
		if err := tg.Run().Wait(); err != nil {
			t.Fatal(err)
		}
	})
	same := testing.AllocsPerRun(50, func() {
		if err := tg.Replay().Wait(); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("heap allocations: %.1f a fresh nowait task on a present buffer (with its Wait); %.2f a task of Run's replay (%.0f a replay of %d), %.2f of Replay's (%.0f)", fresh, replay/n, replay, n, same/n, same)
	// Under the race detector a replay's count moves by one or two from
	// run to run (its instrumentation allocates): raceAllocs allows for it.
	if replay/n >= fresh || same > replay+raceAllocs {
		t.Errorf("a task of Run's replay allocates %.2f, of Replay's %.2f, a fresh one %.1f: want fewer, then no more", replay/n, same/n, fresh)
	}
	// A typed launch of Run's function puts its arguments in the
	// recorder's room: a replayed construct allocates nothing but a
	// scalar's box (none here: small integers are not boxed). It was 2
	// (the arguments' []any and the slice's box).
	if replay/n > 0.3+raceNodeAllocs {
		t.Errorf("a task of Run's replay allocates %.2f: want no allocation per construct", replay/n)
	}
	// A Replay allocates per replay, not per node: a graph of twice the
	// nodes costs the same (it was 2 a node: the host queue's launch
	// closure and the typed kernel's bound call).
	double := offload.NewTaskgraph(func(r *offload.Recorder) error {
		for range 2 * n {
			AddN.Nowait(r.Nowait(dev, offload.DependInOut(x)), v, x)
		}
		return nil
	})
	if err := double.Run().Wait(); err != nil {
		t.Fatal(err)
	}
	twice := testing.AllocsPerRun(50, func() {
		if err := double.Replay().Wait(); err != nil {
			t.Fatal(err)
		}
	})
	if (twice-same)/n > 0.02+raceNodeAllocs {
		t.Errorf("a Replay of %d nodes allocates %.0f times, of %d nodes %.0f: want no allocation per node", n, same, 2*n, twice)
	}
}

// BenchmarkTaskgraphReplay replays Task Bench's trivial graph at width 2
// on host:2 (each point's tasks write its two buffers by parity), by Run
// (the function called, new scalars) and by Replay: the time per task.
func BenchmarkTaskgraphReplay(b *testing.B) {
	start(b, offload.WithDevices("host:2"), offload.WithOffload("MANDATORY"))
	const steps, width = 500, 2
	var out [2][width][]int32
	for par := range 2 {
		for p := range width {
			out[par][p] = make([]int32, 2)
			if err := offload.On(p).EnterData(offload.To(out[par][p])); err != nil {
				b.Fatal(err)
			}
		}
	}
	v := int32(0)
	tg := offload.NewTaskgraph(func(r *offload.Recorder) error {
		for t := range steps {
			for p := range width {
				AddN.Nowait(r.Nowait(offload.On(p), offload.DependOut(out[t%2][p])), v, out[t%2][p])
			}
		}
		return nil
	})
	if err := tg.Run().Wait(); err != nil {
		b.Fatal(err)
	}
	for _, how := range []string{"Run", "Replay"} {
		b.Run(how, func(b *testing.B) {
			for range b.N {
				var t *offload.Task
				if how == "Run" {
					v++
					t = tg.Run()
				} else {
					t = tg.Replay()
				}
				if err := t.Wait(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*steps*width), "ns/task")
		})
	}
}

// AddOrPanic is AddN that panics for v == 42.
var AddOrPanic = offload.MustKernel2("graph.addorpanic", func(_ offload.Ctx, v int32, x offload.InOut[int32]) {
	if v == 42 {
		panic("graph: 42")
	}
	for i := range x {
		x[i] += v
	}
})

// TestTaskgraphOrder: a replay comes after the tasks made before it that
// its clauses name, and before those made after it; a node's failure is
// the replay's (ErrKernelFailed), its dependents' ErrDependency, and the
// next replay runs again on fresh queues. On host:2 and local:2.
func TestTaskgraphOrder(t *testing.T) {
	for _, devs := range []string{"host:2", "local:2"} {
		t.Run(devs, func(t *testing.T) {
			start(t, offload.WithDevices(devs), offload.WithOffload("MANDATORY"))
			x := filled(32, 0)
			mapAll(t, [][]int32{x}, 2)
			d0, d1 := offload.On(0), offload.On(1)
			v := int32(1)
			tg := offload.NewTaskgraph(func(r *offload.Recorder) error {
				AddOrPanic.Nowait(r.Nowait(d0, offload.DependInOut(x)), v, x)
				offload.CopyNowait(r.Nowait(d1, offload.DependInOut(x)), d1, x, d0, x)
				AddN.Nowait(r.Nowait(d1, offload.DependInOut(x)), 10, x)
				return nil
			})
			if err := tg.Run().Wait(); err != nil {
				t.Fatal(err)
			}
			want := int32(11) // d1's copy: d0's 1, plus 10
			for range 5 {
				// Before: d0's x set to 100 by a task the replay must
				// wait for; after: d1's x doubled by one that waits for
				// the replay.
				d0.Nowait(offload.DependOut(x)).Run(Fill, int32(100), x)
				rt := tg.Replay()
				AddN.Nowait(d1.Nowait(offload.DependInOut(x)), int32(1000), x)
				if err := offload.Taskwait(context.Background()); err != nil {
					t.Fatal(err)
				}
				if err := rt.Wait(); err != nil {
					t.Fatal(err)
				}
				want = 100 + 1 + 10 + 1000
				if got := deviceCopy(t, d1, x); !allEqual(got, want) {
					t.Fatalf("d1's x after fill, replay, add: %v, want %d", got[:4], want)
				}
			}
			if devs == "host:2" {
				// A task the replay waits for, held at a gate: the
				// replay does not run, nor the task after it, until
				// the gate opens.
				id, g := newGate(t)
				d0.Nowait(offload.DependInOut(x)).Run(Fill, int32(7), x)
				held := d0.Nowait(offload.DependInOut(x)).Run(Hold, id, x)
				rt := tg.Replay()
				<-g.started
				select {
				case <-rt.Done():
					t.Fatal("the replay completed before the task it waits for")
				default:
				}
				g.release()
				if err := held.Wait(); err != nil {
					t.Fatal(err)
				}
				if err := rt.Wait(); err != nil {
					t.Fatal(err)
				}
				if got, want := deviceCopy(t, d1, x), int32(7+1+1+10); !allEqual(got, want) {
					t.Fatalf("d1's x after fill, held add, replay: %v, want %d", got[:4], want)
				}
			}
			v = 42
			failed := tg.Run()
			after := AddN.Nowait(d1.Nowait(offload.DependInOut(x)), int32(1), x)
			if err := failed.Wait(); !errors.Is(err, offload.ErrKernelFailed) {
				t.Fatalf("a replay whose kernel panics: %v, want ErrKernelFailed", err)
			}
			if err := after.Wait(); !errors.Is(err, offload.ErrDependency) {
				t.Fatalf("a task after a failed replay: %v, want ErrDependency", err)
			}
			v = 2
			d0.Nowait(offload.DependOut(x)).Run(Fill, int32(0), x)
			if err := tg.Run().Wait(); err != nil {
				t.Fatalf("a replay after a failed one: %v", err)
			}
			if got := deviceCopy(t, d1, x); !allEqual(got, 12) {
				t.Fatalf("d1's x after the replay that follows a failed one: %v, want 12", got[:4])
			}
			if err := offload.Taskwait(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTaskgraphDeviceLost: a replay on local:2 whose device process is
// killed, before it or while it runs, fails with ErrDeviceLost; nothing
// hangs, and the other device goes on.
func TestTaskgraphDeviceLost(t *testing.T) {
	if err := offload.Start(offload.WithDevices("local:2"), offload.WithOffload("MANDATORY")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop() // its error is the device's death
	x := filled(1<<12, 0)
	d0, d1 := offload.On(0), offload.On(1)
	for _, d := range []offload.Device{d0, d1} {
		if err := d.EnterData(offload.To(x)); err != nil {
			t.Fatal(err)
		}
	}
	tg := offload.NewTaskgraph(func(r *offload.Recorder) error {
		for range 200 {
			AddN.Nowait(r.Nowait(d0, offload.DependInOut(x)), 1, x)
			offload.CopyNowait(r.Nowait(d1, offload.DependInOut(x)), d1, x, d0, x)
			AddN.Nowait(r.Nowait(d1, offload.DependInOut(x)), 1, x)
		}
		return nil
	})
	if err := tg.Run().Wait(); err != nil {
		t.Fatal(err)
	}
	info, err := d1.Info()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	running := tg.Replay()
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The replay running as the device died fails, unless it was done
	// already; the next one fails.
	err = running.WaitContext(ctx)
	t.Logf("the replay running as the device died: %v", err)
	if err != nil && !errors.Is(err, offload.ErrDeviceLost) {
		t.Fatalf("the replay running as the device died: %v, want ErrDeviceLost", err)
	}
	if err := tg.Replay().WaitContext(ctx); !errors.Is(err, offload.ErrDeviceLost) {
		t.Fatalf("a replay after the device died: %v, want ErrDeviceLost", err)
	}
	_ = offload.Taskwait(ctx)
	// The other device goes on.
	if err := AddN.Nowait(d0.Nowait(), 1, x).WaitContext(ctx); err != nil {
		t.Errorf("a task on device 0 after device 1 died: %v", err)
	}
}

// TestTaskgraphRestart: a graph recorded under a runtime since stopped
// records again under the next one.
func TestTaskgraphRestart(t *testing.T) {
	x := filled(8, 0)
	tg := offload.NewTaskgraph(func(r *offload.Recorder) error {
		AddN.Nowait(r.Nowait(offload.On(0), offload.DependInOut(x)), 1, x)
		return nil
	})
	for i := range 2 {
		if err := offload.Start(offload.WithDevices("host:1"), offload.WithOffload("MANDATORY")); err != nil {
			t.Fatal(err)
		}
		if tg.Recorded() {
			t.Errorf("start %d: recorded under a stopped runtime", i)
		}
		err := offload.Data(func() error {
			for range 2 {
				if err := tg.Run().Wait(); err != nil {
					return err
				}
			}
			return nil
		}, offload.ToFrom(x))
		if err != nil {
			t.Errorf("start %d: %v", i, err)
		}
		if err := offload.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	if !allEqual(x, 4) {
		t.Errorf("x = %v, want 4s: two records and two replays", x)
	}
}
