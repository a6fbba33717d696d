package offload_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/tool"
)

// TestAnyRerunAfterKill: random graphs of Any-tasks (and host tasks) on two
// local device processes; once a task in the middle is done, device 1's
// process is SIGKILLed, with tasks placed on it still queued or running
// and data whose only valid copy it held. Every task's Wait still
// succeeds, and after Taskwait every buffer holds what the same steps in
// program order give: the lost device's tasks ran again elsewhere, and
// what it alone held was recomputed from the tasks that wrote it. Tasks
// made after the kill go to the device left.
//
// Re-runs go to the program's CPU (GOFFLOAD_ANY_RERUN_HOST unset), or,
// with GOFFLOAD_ANY_RERUN_HOST=0, to device 0: the info lines say which.
func TestAnyRerunAfterKill(t *testing.T) {
	for _, c := range []struct {
		hostTasks bool
		rerunHost string
		firstSet  bool // each buffer's first task writes it whole without reading it: no first version is kept
	}{{false, "", false}, {true, "", false}, {true, "0", false}, {false, "", true}} {
		name := "kernels"
		if c.hostTasks {
			name = "with-host-tasks"
		}
		if c.firstSet {
			name = "first-written"
		}
		firstSet := c.firstSet
		where := "the host"
		if c.rerunHost == "0" {
			name, where = name+"/rerun-on-devices", "device 0"
		}
		hostTasks := c.hostTasks
		t.Run(name, func(t *testing.T) {
			t.Setenv("GOFFLOAD_ANY_RERUN_HOST", c.rerunHost)
			var infoOut syncBuffer
			pid := startTwoLocal(t, offload.WithInfo("placement", &infoOut))
			const nbuf, n, tasks = 6, 256, 160
			r := rand.New(rand.NewPCG(3, 9))
			bufs, model := make([][]int64, nbuf), make(anyModel, nbuf)
			for b := range nbuf {
				bufs[b], model[b] = make([]int64, n), make([]int64, n)
				for i := range n {
					bufs[b][i] = int64(b*n + i)
					model[b][i] = bufs[b][i]
				}
			}
			var all []*offload.Task
			if firstSet {
				for b := range nbuf {
					all = append(all, anySet.Nowait(offload.Any().Nowait(), int64(b), bufs[b]))
					model.set(int64(b), b)
				}
			}
			for i := range tasks {
				dst := r.IntN(nbuf)
				kv := int64(r.IntN(5))
				src := (dst + 1 + r.IntN(nbuf-1)) % nbuf
				switch c := r.IntN(8); {
				case c == 0:
					all = append(all, anySet.Nowait(offload.Any().Nowait(), kv, bufs[dst]))
					model.set(kv, dst)
				case c == 1 && hostTasks:
					s, d := bufs[src], bufs[dst]
					all = append(all, offload.Nowait(offload.DependIn(s), offload.DependInOut(d)).Go("host.step", func() error {
						for i := range d {
							d[i] = d[i]*3 + s[i] + kv
						}
						return nil
					}))
					model.step(kv, src, dst)
				default:
					all = append(all, anyStep.Nowait(offload.Any().Nowait(), kv, bufs[src], bufs[dst]))
					model.step(kv, src, dst)
				}
				if i == tasks/2 {
					// Both devices hold data by now, some of it only
					// there; tasks before this one may still run.
					if err := all[i].Wait(); err != nil {
						t.Fatalf("task %d: %v", i, err)
					}
					if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, tk := range all {
				if err := tk.Wait(); err != nil {
					t.Errorf("task %d: %v", i, err)
				}
			}
			if err := offload.Taskwait(context.Background()); err != nil {
				t.Fatalf("Taskwait: %v", err)
			}
			checkAny(t, "after the kill and Taskwait", bufs, model)
			// Whether anything ran again depends on what device 1 had
			// left: what did ran where it should.
			if lines := grepLines(infoOut.String(), " ran again on "); strings.Count(lines, " ran again on "+where) != strings.Count(lines, "\n") {
				t.Errorf("the re-runs' info lines do not all say they ran on %s:\n%s", where, lines)
			}
			if _, err := offload.On(1).Info(); !errors.Is(err, offload.ErrDeviceLost) {
				t.Errorf("device 1 after the kill: %v, want ErrDeviceLost", err)
			}
			// Later Any-tasks go to the device left.
			if err := anyStep.Run(offload.Any(), 1, bufs[1], bufs[0]); err != nil {
				t.Fatalf("an Any-task after the loss: %v", err)
			}
			model.step(1, 1, 0)
			if err := offload.Taskwait(context.Background()); err != nil {
				t.Fatal(err)
			}
			checkAny(t, "an Any-task after the loss", bufs, model)
		})
	}
}

// anyGate writes k into out once the gate file of id exists (or after 30
// seconds): a kernel that holds its device until the test lets it go.
var anyGate = offload.MustKernel2("test.any.gate", func(ctx offload.Ctx, id int64, out offload.Out[int64]) {
	waitAnyGate(id)
	for i := range out {
		out[i] = id
	}
})

// waitAnyGate returns once the gate file of id exists, or after 30
// seconds.
func waitAnyGate(id int64) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("goffload-anygate-%d", id))
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
}

// TestAnyOnceIsNotRerun: an Any-task of a kernel marked Once whose device
// is lost fails with ErrDeviceLost, as a hand-placed task does, instead of
// running again; an ordinary kernel's task beside it on the same device
// runs again and succeeds.
func TestAnyOnceIsNotRerun(t *testing.T) {
	pid := startTwoLocal(t)
	id := time.Now().UnixNano()
	gate := filepath.Join(os.TempDir(), fmt.Sprintf("goffload-anygate-%d", id))
	t.Cleanup(func() { os.Remove(gate) })
	once := anyGate.Once()
	var out [4][]int64
	for i := range out {
		out[i] = make([]int64, 8)
	}
	// A kernel not timed on a device yet is tried there, one task at a
	// time: the first task goes to device 0, the second to device 1.
	t0 := once.Nowait(offload.Any().Nowait(), id, out[0])
	t1 := once.Nowait(offload.Any().Nowait(), id, out[1])
	plain := anyStep.Nowait(offload.Any().Nowait(), 1, out[2], out[3]) // an ordinary kernel
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e0, e1 := t0.Wait(), t1.Wait()
	lost := 0
	for _, e := range []error{e0, e1} {
		switch {
		case e == nil:
		case errors.Is(e, offload.ErrDeviceLost):
			lost++
		default:
			t.Errorf("a Once task: %v, want nil or ErrDeviceLost", e)
		}
	}
	if lost != 1 {
		t.Errorf("Once tasks on a live and a killed device: %v and %v, want exactly one ErrDeviceLost", e0, e1)
	}
	if err := plain.Wait(); err != nil {
		t.Errorf("an ordinary Any-task beside them: %v", err)
	}
	offload.Taskwait(context.Background())
}

// grepLines is the lines of s that hold sub.
func grepLines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestAnyRestoreBeforeHandback: device 1 is lost after its Any-task
// completed and before Taskwait, holding the only valid copy of what the
// task wrote. Taskwait finds the loss, recomputes that buffer into the
// program's memory, and returns only once it is there: the hand-back
// waits for the restore (it once returned with the restore still running,
// which then found the first versions dropped, so the buffer kept its old
// values: Cholesky's whole matrix came back unfactored).
func TestAnyRestoreBeforeHandback(t *testing.T) {
	for round := range 3 {
		t.Run(fmt.Sprint(round), func(t *testing.T) { restoreBeforeHandback(t, round) })
	}
}

func restoreBeforeHandback(t *testing.T, round int) {
	rs := &restoreSeen{}
	var infoOut syncBuffer
	pid := startTwoLocal(t, offload.WithTool(rs), offload.WithInfo("placement", &infoOut))
	// b is large, so that its restore (a re-run and a copy of 32
	// MiB) takes longer than the rest of the hand-back. Not timed
	// on a device yet, the kernel is tried on each in turn: the
	// first task goes to device 0, the second to device 1.
	a, b := make([]int64, 1<<22), make([]int64, 1<<22)
	ta := anySet.Nowait(offload.Any().Nowait(), 5, a)
	tb := anySet.Nowait(offload.Any().Nowait(), 7, b)
	if err := ta.Wait(); err != nil { // a copied back: the hand-back has nothing to copy
		t.Fatal(err)
	}
	<-tb.Done() // not Wait, which would copy b back
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := offload.On(1).Info(); errors.Is(err, offload.ErrDeviceLost) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("device 1 was not lost 20 s after SIGKILL")
		}
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatalf("round %d: Taskwait: %v", round, err)
	}
	if begun, ended := rs.counts(); begun == 0 || ended != begun {
		t.Fatalf("round %d: Taskwait returned with %d of %d restores ended", round, ended, begun)
	}
	// The restore re-ran b's writer on the program's CPU, where its
	// output is (GOFFLOAD_ANY_RERUN_HOST unset).
	if out := infoOut.String(); !strings.Contains(out, "ran again on the host") {
		t.Errorf("round %d: no re-run on the host:\n%s", round, grepLines(out, "Any()"))
	}
	for i := range a {
		if a[i] != 5+int64(i) {
			t.Fatalf("round %d: after Taskwait a[%d] = %d, want %d", round, i, a[i], 5+i)
		}
	}
	for i := range b {
		if b[i] != 7+int64(i) {
			t.Fatalf("round %d: after Taskwait b[%d] = %d, want %d", round, i, b[i], 7+i)
		}
	}
}

// restoreSeen counts the restore tasks (Any(): restore …) begun and ended.
type restoreSeen struct {
	mu           sync.Mutex
	begun, ended int
}

func (r *restoreSeen) TargetBegin(e tool.TargetEvent) {
	if strings.HasPrefix(e.Name, "Any(): restore") {
		r.mu.Lock()
		r.begun++
		r.mu.Unlock()
	}
}

func (r *restoreSeen) TargetEnd(e tool.TargetEvent) {
	if strings.HasPrefix(e.Name, "Any(): restore") {
		r.mu.Lock()
		r.ended++
		r.mu.Unlock()
	}
}

func (r *restoreSeen) counts() (begun, ended int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.begun, r.ended
}

func (r *restoreSeen) DataOp(tool.DataEvent)         {}
func (r *restoreSeen) KernelLaunch(tool.KernelEvent) {}
func (r *restoreSeen) Wait(tool.WaitEvent)           {}

// startTwoLocal starts local:2 (MANDATORY, with opts) for t, stopped at
// its end with device 1 lost or not, and returns device 1's process.
func startTwoLocal(t *testing.T, opts ...offload.Option) int {
	t.Helper()
	opts = append([]offload.Option{offload.WithDevices("local:2"), offload.WithOffload("MANDATORY")}, opts...)
	if err := offload.Start(opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := offload.Stop(); err != nil && !errors.Is(err, offload.ErrDeviceLost) {
			t.Errorf("Stop: %v", err)
		}
	})
	info, err := offload.On(1).Info()
	if err != nil || info.PID <= 0 {
		t.Fatalf("device 1: Info: %+v, %v", info, err)
	}
	return info.PID
}
