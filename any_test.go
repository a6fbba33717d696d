package offload_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/internal/tracefile"
	"github.com/goffload/offload/plugins/cuda"
	"github.com/goffload/offload/tool"
)

// Kernels of the Any-task tests: functions of their inputs, as Any-tasks'
// kernels should be.
var (
	anyStep = offload.MustKernel3("test.any.step", func(ctx offload.Ctx, k int64, src offload.In[int64], dst offload.InOut[int64]) {
		for i := range dst {
			dst[i] = dst[i]*3 + src[i] + k
		}
	})
	anySet = offload.MustKernel2("test.any.set", func(ctx offload.Ctx, k int64, dst offload.Out[int64]) {
		for i := range dst {
			dst[i] = k + int64(i)
		}
	})
)

// anyModel is what the Any-task tests' buffers hold, computed on the host
// in the order the tasks were made.
type anyModel [][]int64

func (m anyModel) step(k int64, src, dst int) {
	for i := range m[dst] {
		m[dst][i] = m[dst][i]*3 + m[src][i] + k
	}
}

func (m anyModel) set(k int64, dst int) {
	for i := range m[dst] {
		m[dst][i] = k + int64(i)
	}
}

// TestAnyCoherence: random graphs of Any-tasks over a few buffers, each
// task reading one and updating another (or overwriting one), with host
// tasks (Async.Go) on the same buffers among them, on two devices of every
// kind: after Taskwait every buffer holds what the same
// steps in program order give, whatever the placement and wherever the
// valid copies were; a task's Wait and a group's Wait make what those tasks
// wrote visible; and Taskwait gives the buffers back (a hand-placed map of
// one works again).
func TestAnyCoherence(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testKind) {
		k.start(t, 2)
		const nbuf, n, tasks = 5, 64, 120
		for round := range 3 {
			r := rand.New(rand.NewPCG(uint64(round), 7))
			bufs, model := make([][]int64, nbuf), make(anyModel, nbuf)
			for b := range nbuf {
				bufs[b], model[b] = make([]int64, n), make([]int64, n)
				for i := range n {
					bufs[b][i] = int64(b*n + i)
					model[b][i] = bufs[b][i]
				}
			}
			var g offload.Group
			var last *offload.Task
			lastDst := -1
			for i := range tasks {
				dst := r.IntN(nbuf)
				kv := int64(r.IntN(5))
				nw := offload.Any().Nowait()
				if i%2 == 0 {
					nw = nw.In(&g)
				}
				switch r.IntN(6) {
				case 0:
					last = anySet.Nowait(nw, kv, bufs[dst])
					model.set(kv, dst)
				case 1:
					// A host task on the same buffers: it reads and
					// writes the program's memory.
					src := (dst + 1 + r.IntN(nbuf-1)) % nbuf
					s, d := bufs[src], bufs[dst]
					last = offload.Nowait(offload.DependIn(s), offload.DependInOut(d)).In(&g).Go("host.step", func() error {
						for i := range d {
							d[i] = d[i]*3 + s[i] + kv
						}
						return nil
					})
					model.step(kv, src, dst)
				default:
					src := (dst + 1 + r.IntN(nbuf-1)) % nbuf
					last = anyStep.Nowait(nw, kv, bufs[src], bufs[dst])
					model.step(kv, src, dst)
				}
				lastDst = dst
				if i == tasks/2 {
					// A task's Wait: what it wrote is in the program's
					// memory (no later task writes it before the check).
					if err := last.Wait(); err != nil {
						t.Fatalf("round %d: task %d: %v", round, i, err)
					}
					if err := offload.Taskwait(context.Background()); err != nil {
						t.Fatal(err)
					}
					checkAny(t, "after a task's Wait and Taskwait", bufs, model)
				}
			}
			if err := g.Wait(context.Background()); err != nil {
				t.Fatalf("round %d: group: %v", round, err)
			}
			if err := last.Wait(); err != nil {
				t.Fatalf("round %d: last task: %v", round, err)
			}
			if got, want := bufs[lastDst], model[lastDst]; !slices.Equal(got, want) {
				t.Errorf("round %d: after the last task's Wait, buffer %d = %v…, want %v…", round, lastDst, got[:4], want[:4])
			}
			if err := offload.Taskwait(context.Background()); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			checkAny(t, "after Taskwait", bufs, model)
			// Given back: a hand-placed construct may map them again.
			if err := offload.On(1).EnterData(offload.To(bufs[0])); err != nil {
				t.Fatalf("round %d: map after Taskwait: %v", round, err)
			}
			if err := offload.On(1).ExitData(offload.Delete(bufs[0])); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func checkAny(t *testing.T, when string, bufs [][]int64, model anyModel) {
	t.Helper()
	for b := range bufs {
		if !slices.Equal(bufs[b], model[b]) {
			t.Fatalf("%s: buffer %d = %v…, want %v…", when, b, bufs[b][:4], model[b][:4])
		}
	}
}

// TestAnyRefusesMixing: while Any-tasks use a buffer, a hand-placed
// construct that maps it, or an Any-task that uses a section overlapping it
// without lying inside it, fails with ErrBadMap and says to call Taskwait; Any()
// refuses the constructs that need one device; after Taskwait all is
// well again.
func TestAnyRefusesMixing(t *testing.T) {
	start(t, offload.WithDevices("host:2"), offload.WithOffload("MANDATORY"))
	big, y := make([]int64, 64), make([]int64, 32)
	x := big[:32]
	if err := anyStep.Nowait(offload.Any().Nowait(), 1, y, x).Wait(); err != nil {
		t.Fatal(err)
	}
	err := offload.On(0).EnterData(offload.To(x))
	if !errors.Is(err, offload.ErrBadMap) || !contains(err.Error(), "Taskwait") {
		t.Errorf("hand-placed map of an Any-task's buffer: %v, want ErrBadMap naming Taskwait", err)
	}
	if err := anyStep.Run(offload.On(1), 1, y, x); !errors.Is(err, offload.ErrBadMap) {
		t.Errorf("hand-placed launch on an Any-task's buffer: %v, want ErrBadMap", err)
	}
	if err := anyStep.Nowait(offload.Any().Nowait(), 1, y, big[16:48]).Wait(); !errors.Is(err, offload.ErrBadMap) {
		t.Errorf("Any-task on a section sticking out of a buffer in use: %v, want ErrBadMap", err)
	}
	if err := offload.Any().ExitData(offload.From(y)); !errors.Is(err, offload.ErrBadArgument) {
		t.Errorf("Any().ExitData: %v, want ErrBadArgument", err)
	}
	if err := offload.Any().Update(offload.To(y)); !errors.Is(err, offload.ErrBadMap) {
		t.Errorf("Any().Update(To): %v, want ErrBadMap", err)
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := anyStep.Run(offload.On(1), 1, y, x); err != nil {
		t.Errorf("hand-placed launch after Taskwait: %v", err)
	}
	if x[0] != (0*3+1)*3+1 {
		t.Errorf("x[0] = %d, want %d", x[0], (0*3+1)*3+1)
	}
}

// anyForce is the N-body pattern's force step: each part's velocities
// from every position; anyMove moves a part's positions by its velocities.
var (
	anyForce = offload.MustKernel3("test.any.force", func(ctx offload.Ctx, lo int, pos offload.In[int64], vel offload.InOut[int64]) {
		var sum int64
		for _, p := range pos {
			sum += p
		}
		for i := range vel {
			vel[i] += sum - pos[lo+i]
		}
	})
	anyMove = offload.MustKernel2("test.any.move", func(ctx offload.Ctx, vel offload.In[int64], pos offload.InOut[int64]) {
		for i := range pos {
			pos[i] = (pos[i] + vel[i]) % 1000
		}
	})
)

// TestAnySections: the N-body pattern a new user wrote: tasks update the
// halves of the positions and velocities, each reading all the positions,
// on two devices of every kind; the halves' copies move between the
// devices as sections of one buffer, and the result is right.
func TestAnySections(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testKind) {
		k.start(t, 2)
		const n, half = 64, 32
		pos, vel := make([]int64, n), make([]int64, n)
		wpos, wvel := make([]int64, n), make([]int64, n)
		for i := range pos {
			pos[i], wpos[i] = int64(i), int64(i)
		}
		for range 6 {
			for h := range 2 {
				anyForce.Nowait(offload.Any().Nowait(), h*half, pos, vel[h*half:(h+1)*half])
			}
			for h := range 2 {
				anyMove.Nowait(offload.Any().Nowait(), vel[h*half:(h+1)*half], pos[h*half:(h+1)*half])
			}
			var sum int64
			for _, p := range wpos {
				sum += p
			}
			for i := range wvel {
				wvel[i] += sum - wpos[i]
			}
			for i := range wpos {
				wpos[i] = (wpos[i] + wvel[i]) % 1000
			}
		}
		if err := offload.Taskwait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(pos, wpos) || !slices.Equal(vel, wvel) {
			t.Errorf("pos = %v…, want %v…; vel = %v…, want %v…", pos[:4], wpos[:4], vel[:4], wvel[:4])
		}
	})
}

// TestAnyNoDevices: with no devices, Any-tasks run on the initial device.
func TestAnyNoDevices(t *testing.T) {
	start(t, offload.WithDevices(""))
	x, y := []int64{1, 2}, []int64{10, 20}
	if err := anyStep.Run(offload.Any(), 1, x, y); err != nil {
		t.Fatal(err)
	}
	if y[0] != 32 || y[1] != 63 {
		t.Errorf("y = %v, want [32 63]", y)
	}
}

// TestAnySkipsDevicesWithoutCode: a GPU that has no code for a kernel (no
// PTX, and no emulation) gets none of its Any-tasks; they go to the host
// device beside it, and the result is right.
func TestAnySkipsDevicesWithoutCode(t *testing.T) {
	t.Cleanup(cuda.UseDriverForTests(cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{matrixGPU}})))
	ran := &kernelCounter{}
	start(t, offload.WithDevices("cuda,host"), offload.WithOffload("MANDATORY"), offload.WithTool(ran))
	x, y := make([]int64, 16), make([]int64, 16)
	want := make([]int64, 16)
	for i := range 8 {
		anyStep.Nowait(offload.Any().Nowait(), int64(i), x, y)
		for j := range want {
			want[j] = want[j]*3 + int64(i)
		}
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(y, want) {
		t.Errorf("y = %v…, want %v…", y[:4], want[:4])
	}
	if ran.on(0) != 0 || ran.on(1) != 8 {
		t.Errorf("kernels on the GPU %d, on the host device %d; want 0 and 8", ran.on(0), ran.on(1))
	}
}

// kernelCounter counts kernel launches per device.
type kernelCounter struct {
	mu sync.Mutex
	n  map[int]int
}

func (c *kernelCounter) TargetBegin(tool.TargetEvent) {}
func (c *kernelCounter) TargetEnd(tool.TargetEvent)   {}
func (c *kernelCounter) DataOp(tool.DataEvent)        {}
func (c *kernelCounter) Wait(tool.WaitEvent)          {}
func (c *kernelCounter) KernelLaunch(e tool.KernelEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[int]int{}
	}
	c.n[e.Device]++
}

func (c *kernelCounter) on(d int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[d]
}

// TestAnyPlacementInTrace: the GOFFLOAD_PROFILE trace says, on each
// Any-task's span, where the runtime put it and why, and the copies its
// data needed and from where (args.runtime), as GOFFLOAD_INFO=placement
// prints them.
func TestAnyPlacementInTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	if err := offload.Start(offload.WithDevices("host:2"), offload.WithProfile(path)); err != nil {
		t.Fatal(err)
	}
	x, y := make([]int64, 64), make([]int64, 64)
	var ids []uint64
	for i := range 4 {
		ids = append(ids, anyStep.Nowait(offload.Any().Nowait(), int64(i), x, y).ID())
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := offload.Stop(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, err := tracefile.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	notes := map[uint64]string{}
	for _, e := range evs {
		if e.Cat != "task" {
			continue
		}
		id, _ := e.Args["task"].(float64)
		if rs, ok := e.Args["runtime"].([]any); ok && len(rs) > 0 {
			notes[uint64(id)], _ = rs[0].(string)
		}
	}
	for i, id := range ids {
		n := notes[id]
		if !strings.HasPrefix(n, "Any(): on device ") || !strings.Contains(n, "expected to finish") && !strings.Contains(n, "not timed there yet") {
			t.Errorf("task %d (%d): trace note %q, want where it went and why", i, id, n)
		}
		if i == 0 && !strings.Contains(n, `copies "test.any.step.arg1"`) {
			t.Errorf("the first task's note %q names no copy of its input", n)
		}
	}
}

// TestAnyEvictsUnderMemoryPressure: a GPU with room for a few of the
// buffers a run of Any-tasks reads: before an allocation fails, the
// runtime frees the copies no task needs any more and that are valid on
// the host too, and the run succeeds with the right result; a run whose
// buffers are written there (their only valid copies) cannot make room,
// and fails with ErrOutOfMemory rather than lose data.
func TestAnyEvictsUnderMemoryPressure(t *testing.T) {
	const n, nbuf = 1024, 8 // 8 KiB a buffer
	gpu := matrixGPU
	gpu.Memory = 5 * 8 * n // the accumulator and 4 buffers
	t.Cleanup(cuda.UseEmulatedDriverForTests(cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{gpu}})))
	start(t, offload.WithDevices("cuda"), offload.WithOffload("MANDATORY"))
	acc := make([]int64, n)
	bufs := make([][]int64, nbuf)
	want := make([]int64, n)
	for b := range bufs {
		bufs[b] = make([]int64, n)
		for i := range n {
			bufs[b][i] = int64(b + i)
		}
	}
	for round := range 2 {
		for b := range bufs {
			k := int64(b + round)
			anyStep.Nowait(offload.Any().Nowait(), k, bufs[b], acc)
			for i := range want {
				want[i] = want[i]*3 + bufs[b][i] + k
			}
		}
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatalf("reading %d buffers through a GPU with room for 4: %v", nbuf, err)
	}
	if !slices.Equal(acc, want) {
		t.Errorf("acc = %v…, want %v…", acc[:4], want[:4])
	}
	// Every buffer written on the GPU (Taskwait freed the GPU's copies),
	// with no Wait between: the sixth finds no copy it could free.
	var ts []*offload.Task
	for b := range bufs {
		ts = append(ts, anySet.Nowait(offload.Any().Nowait(), int64(b), bufs[b]))
	}
	var err error
	for _, tk := range ts {
		if e := tk.Wait(); e != nil && err == nil {
			err = e
		}
	}
	if !errors.Is(err, offload.ErrOutOfMemory) {
		t.Errorf("writing %d buffers on a GPU with room for 5: %v, want ErrOutOfMemory", nbuf, err)
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Logf("Taskwait after the failure: %v", err)
	}
}

// TestTaskwaitReportsTasksNotCreated: a task that could not be created (an
// Any-task whose section a buffer in use refuses, a nil kernel) is
// reported by Taskwait when nothing else reported it, once; a Task.Wait or
// a Group's Wait that returned it reports it.
func TestTaskwaitReportsTasksNotCreated(t *testing.T) {
	start(t, offload.WithDevices("host:2"), offload.WithOffload("MANDATORY"))
	ctx := context.Background()
	big, y := make([]int64, 64), make([]int64, 32)
	anyStep.Nowait(offload.Any().Nowait(), 1, y, big[:32])
	anyStep.Nowait(offload.Any().Nowait(), 1, y, big[16:48]) // refused, not waited for
	offload.On(0).Nowait().Run(nil)                          // refused too
	err := offload.Taskwait(ctx)
	if !errors.Is(err, offload.ErrBadMap) || !contains(err.Error(), "1 more") {
		t.Errorf("Taskwait after two tasks not created: %v, want the first's ErrBadMap and the count of the other", err)
	}
	if err := offload.Taskwait(ctx); err != nil {
		t.Errorf("second Taskwait: %v, want nil (reported)", err)
	}
	if err := offload.On(0).Nowait().Run(nil).Wait(); !errors.Is(err, offload.ErrBadArgument) {
		t.Errorf("nil kernel: %v", err)
	}
	if err := offload.Taskwait(ctx); err != nil {
		t.Errorf("Taskwait after the failure's Wait: %v, want nil", err)
	}
	var g offload.Group
	offload.On(0).Nowait().In(&g).Run(nil)
	if err := g.Wait(ctx); !errors.Is(err, offload.ErrBadArgument) {
		t.Errorf("Group.Wait: %v", err)
	}
	if err := offload.Taskwait(ctx); err != nil {
		t.Errorf("Taskwait after the group's Wait: %v, want nil", err)
	}
}
