package offload_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/entries"
)

// The declare target variables of the tests, declared at package init like
// kernels: device processes declare them too, in the same order.
var (
	// declCounter is a scalar "to" variable: every device has its own.
	declCounter = offload.DeclareTarget("declare.counter", []int64{7})
	// declTable is a "to" variable of several elements.
	declTable = offload.DeclareTarget("declare.table", []float64{1, 2, 3, 4, 5})
	// declLinked is a "link" variable, a section of declLinkBacking (mapping the
	// whole backing array maps it too).
	declLinkBacking = make([]int32, 12)
	declLinked      = offload.DeclareTargetLink("declare.linked", declLinkBacking[2:10])
)

var (
	// declRead writes the device's counter and number to out.
	declRead = offload.MustKernel("declare.read", func(ctx offload.Ctx, out []int64) {
		out[0] = declCounter.On(ctx)[0]
		out[1] = int64(ctx.Device())
	})
	declAdd = offload.MustKernel("declare.add", func(ctx offload.Ctx, v int64) {
		declCounter.On(ctx)[0] += v
	})
	// declSame reports whether x, mapped as a kernel argument, is the device's
	// copy of declCounter.
	declSame = offload.MustKernel("declare.same", func(ctx offload.Ctx, x []int64, out []int64) {
		out[0] = 0
		if &x[0] == &declCounter.On(ctx)[0] {
			out[0] = 1
		}
	})
	declScale = offload.MustKernel("declare.scale", func(ctx offload.Ctx, f float64) {
		t := declTable.On(ctx)
		ctx.For(len(t), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				t[i] *= f
			}
		})
	})
	declLinkAdd = offload.MustKernel("declare.link_add", func(ctx offload.Ctx, v int32) {
		l := declLinked.On(ctx)
		for i := range l {
			l[i] += v
		}
	})
	// declLinkArg adds v through the variable and checks that x, the slice
	// mapped as its argument, is the same memory.
	declLinkArg = offload.MustKernel("declare.link_arg", func(ctx offload.Ctx, v int32, x []int32) {
		l := declLinked.On(ctx)
		if &l[0] != &x[0] {
			panic("the link variable is not the mapped argument")
		}
		for i := range l {
			l[i] += v
		}
	})
)

// declConfigs are the device sets every test runs on: devices in this process,
// device processes, and none (the initial device only).
var declConfigs = []struct {
	name string
	opt  offload.Option
}{
	{"host:2", offload.WithDevices("host:2")},
	{"local:2", offload.WithDevices("local:2")},
	{"initial", offload.WithOffload("DISABLED")},
}

// declDevices is every device, the initial one last.
func declDevices() []offload.Device {
	var ds []offload.Device
	for i := 0; i <= offload.NumDevices(); i++ {
		ds = append(ds, offload.On(i))
	}
	return ds
}

// readCounter returns the counter of dev, checking where the kernel ran.
func readCounter(t *testing.T, dev offload.Device) int64 {
	t.Helper()
	out := make([]int64, 2)
	if err := dev.Run(declRead, offload.From(out)); err != nil {
		t.Fatalf("%v: declRead: %v", dev, err)
	}
	if out[1] != int64(dev.Num()) {
		t.Fatalf("%v: the kernel ran on device %d", dev, out[1])
	}
	return out[0]
}

func declRun(t *testing.T, dev offload.Device, k *offload.Kernel, args ...any) {
	t.Helper()
	if err := dev.Run(k, args...); err != nil {
		t.Fatalf("%v: %s: %v", dev, k.Name(), err)
	}
}

func declUpdate(t *testing.T, dev offload.Device, m ...offload.Map) {
	t.Helper()
	if err := dev.Update(m...); err != nil {
		t.Fatalf("%v: Update: %v", dev, err)
	}
}

// TestDeclareTo: every device has its own copy of a "to" variable, made from
// the host value at Start; kernels read and write the copy of their device;
// Update moves it; it is a present-table entry that map clauses find.
func TestDeclareTo(t *testing.T) {
	for _, c := range declConfigs {
		t.Run(c.name, func(t *testing.T) {
			declCounter.Host()[0] = 7
			copy(declTable.Host(), []float64{1, 2, 3, 4, 5})
			start(t, c.opt)
			devs := declDevices()
			n := len(devs) - 1
			for _, d := range devs {
				if v := readCounter(t, d); v != 7 {
					t.Fatalf("%v: counter %d at Start, want the host value 7", d, v)
				}
			}
			for _, d := range devs[:n] {
				declRun(t, d, declAdd, int64(10*(d.Num()+1)))
			}
			for _, d := range devs[:n] {
				if v, want := readCounter(t, d), 7+int64(10*(d.Num()+1)); v != want {
					t.Errorf("%v: counter %d, want %d (each device has its own copy)", d, v, want)
				}
			}
			if declCounter.Host()[0] != 7 {
				t.Fatalf("host counter %d after device writes, want 7", declCounter.Host()[0])
			}
			// The initial device's copy is the host's.
			declRun(t, offload.Initial(), declAdd, int64(1))
			if declCounter.Host()[0] != 8 {
				t.Fatalf("host counter %d after a kernel on the initial device added 1 to 7", declCounter.Host()[0])
			}
			if n == 0 {
				return
			}
			// target update from: the last device's copy comes back.
			last := devs[n-1]
			declUpdate(t, last, offload.From(declCounter.Host()))
			if want := 7 + int64(10*n); declCounter.Host()[0] != want {
				t.Fatalf("host counter %d after Update(From) from %v, want %d", declCounter.Host()[0], last, want)
			}
			// target update to: a new host value goes to one device only.
			declCounter.Host()[0] = 100
			declUpdate(t, devs[0], offload.To(declCounter.Host()))
			if v := readCounter(t, devs[0]); v != 100 {
				t.Fatalf("%v: counter %d after Update(To) of 100", devs[0], v)
			}
			if v := readCounter(t, devs[1]); v != 27 {
				t.Fatalf("%v: counter %d after Update(To) on device 0, want its own 27", devs[1], v)
			}
			for _, d := range devs[:n] {
				// Present, with an infinite count: the argument is the copy
				// itself, never copied in or out, and never removed.
				if !d.IsPresent(declCounter.Host()) {
					t.Fatalf("%v: the variable is not present", d)
				}
				out := make([]int64, 1)
				before := readCounter(t, d)
				declCounter.Host()[0] = -1
				declRun(t, d, declSame, declCounter.Host(), offload.From(out))
				declRun(t, d, declSame, offload.ToFrom(declCounter.Host()), offload.From(out))
				if out[0] != 1 {
					t.Fatalf("%v: a mapped argument of the variable's host slice is not its device copy", d)
				}
				if declCounter.Host()[0] != -1 || readCounter(t, d) != before {
					t.Fatalf("%v: mapping the variable copied it (host %d, device %d, was %d)", d, declCounter.Host()[0], readCounter(t, d), before)
				}
				if err := d.ExitData(offload.Delete(declCounter.Host())); err != nil {
					t.Fatalf("%v: ExitData(Delete): %v", d, err)
				}
				if !d.IsPresent(declCounter.Host()) || readCounter(t, d) != before {
					t.Fatalf("%v: ExitData(Delete) removed the variable", d)
				}
				err := d.Disassociate(declCounter.Host())
				if !errors.Is(err, offload.ErrBadArgument) || !strings.Contains(err.Error(), `"declare.counter"`) {
					t.Fatalf("%v: Disassociate of the variable: %v, want ErrBadArgument naming it", d, err)
				}
			}
			// A vector variable, split over the device's cores.
			for _, d := range devs[:n] {
				declRun(t, d, declScale, float64(d.Num()+2))
			}
			for _, d := range devs[:n] {
				declUpdate(t, d, offload.From(declTable.Host()))
				for i, v := range declTable.Host() {
					if want := float64(i+1) * float64(d.Num()+2); v != want {
						t.Fatalf("%v: table[%d] = %v, want %v", d, i, v, want)
					}
				}
			}
		})
	}
}

// TestDeclareToRestart: each Start makes the device copies anew from the
// host value of then.
func TestDeclareToRestart(t *testing.T) {
	for i, c := range declConfigs[:2] {
		t.Run(c.name, func(t *testing.T) {
			for round := int64(0); round < 2; round++ {
				declCounter.Host()[0] = 40 + round + int64(i)
				if err := offload.Start(c.opt); err != nil {
					t.Fatal(err)
				}
				d := offload.On(1)
				if v := readCounter(t, d); v != 40+round+int64(i) {
					offload.Stop()
					t.Fatalf("round %d: counter %d, want the host value %d", round, v, 40+round+int64(i))
				}
				declRun(t, d, declAdd, int64(1000))
				if err := offload.Stop(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestDeclareLink: a link variable has device memory only while mapped; a
// kernel sees the mapping of its launch, and fails, naming the variable and
// the device, where there is none.
func TestDeclareLink(t *testing.T) {
	for _, c := range declConfigs {
		t.Run(c.name, func(t *testing.T) {
			h := declLinked.Host()
			for i := range h {
				h[i] = int32(i + 1)
			}
			start(t, c.opt)
			devs := declDevices()
			n := len(devs) - 1
			check := func(what string, base int32) {
				t.Helper()
				for i, v := range h {
					if v != base+int32(i+1) {
						t.Fatalf("%s: host %v, want %d+i+1", what, h, base)
					}
				}
			}
			// The initial device: the host slice, mapped or not.
			declRun(t, offload.Initial(), declLinkAdd, int32(1))
			check("initial device", 1)
			for _, d := range devs[:n] {
				notMapped := func(when string) {
					t.Helper()
					err := d.Run(declLinkAdd, int32(1))
					if !errors.Is(err, offload.ErrKernelFailed) {
						t.Fatalf("%v: %s: kernel using an unmapped link variable: %v, want ErrKernelFailed", d, when, err)
					}
					t.Logf("%s: %v", when, err)
					for _, s := range []string{`"declare.linked"`, fmt.Sprintf("device %d", d.Num()), "not mapped"} {
						if !strings.Contains(err.Error(), s) {
							t.Fatalf("%v: %s: the error does not say %s: %v", d, when, s, err)
						}
					}
				}
				notMapped("never mapped")
				for i := range h {
					h[i] = int32(i + 1)
				}
				// Unstructured mapping: the kernel writes the device copy.
				if err := d.EnterData(offload.To(h)); err != nil {
					t.Fatal(err)
				}
				declRun(t, d, declLinkAdd, int32(10))
				check("after a kernel, before Update", 0)
				declUpdate(t, d, offload.From(h))
				check("Update(From)", 10)
				if err := d.ExitData(offload.Release(h)); err != nil {
					t.Fatal(err)
				}
				notMapped("after ExitData")
				// A data region; then a map clause of the kernel itself.
				err := d.Data(func() error { return d.Run(declLinkAdd, int32(100)) }, offload.ToFrom(h))
				if err != nil {
					t.Fatal(err)
				}
				check("target data", 110)
				declRun(t, d, declLinkArg, int32(1000), offload.ToFrom(h))
				check("map clause", 1110)
				// A mapping of a slice that contains the variable.
				if err := d.EnterData(offload.To(declLinkBacking)); err != nil {
					t.Fatal(err)
				}
				declRun(t, d, declLinkAdd, int32(-1110))
				if err := d.ExitData(offload.From(declLinkBacking)); err != nil {
					t.Fatal(err)
				}
				check("mapped through a containing slice", 0)
				notMapped("at the end")
			}
		})
	}
}

// TestDeclareLinkTasks: tasks map, use and unmap the link variable over and
// over on two devices (new device memory each time, bound on different
// queues), ordered by their dependencies only.
func TestDeclareLinkTasks(t *testing.T) {
	for _, c := range declConfigs[:2] {
		t.Run(c.name, func(t *testing.T) {
			h := declLinked.Host()
			for i := range h {
				h[i] = 0
			}
			start(t, c.opt)
			const rounds = 20
			dep := offload.DependInOut(h)
			for r := 0; r < rounds; r++ {
				d := offload.On(r % 2)
				d.Nowait(dep).EnterData(offload.To(h))
				d.Nowait(dep).Run(declLinkAdd, int32(1))
				if r%3 == 0 { // a task that maps it for itself
					d.Nowait(dep).Run(declLinkArg, int32(1), offload.ToFrom(h))
				}
				d.Nowait(dep).ExitData(offload.From(h))
			}
			if err := offload.Taskwait(t.Context()); err != nil {
				t.Fatal(err)
			}
			want := int32(rounds + (rounds+2)/3)
			for i, v := range h {
				if v != want {
					t.Fatalf("h[%d] = %d after the tasks, want %d", i, v, want)
				}
			}
		})
	}
}

// TestDeclareInfo: the info output shows the variables' entries, and the
// binds of a link variable.
func TestDeclareInfo(t *testing.T) {
	var info bytes.Buffer
	start(t, offload.WithDevices("host"), offload.WithInfo("mapping", &info))
	d := offload.On(0)
	if err := d.Data(func() error { return d.Run(declLinkAdd, int32(0)) }, offload.ToFrom(declLinked.Host())); err != nil {
		t.Fatal(err)
	}
	out := info.String()
	for _, s := range []string{"DynRefCount=INF, HoldRefCount=0, Name=declare.counter (declare target)",
		"Binding declare target link variable declare.linked to TgtPtr="} {
		if !strings.Contains(out, s) {
			t.Errorf("the info output lacks %q:\n%s", s, out)
		}
	}
}

// TestDeclareErrors: what cannot be declared, and declaring while the
// runtime is started.
func TestDeclareErrors(t *testing.T) {
	type result struct {
		err  error
		want string
	}
	var overlap = declCounter.Host()
	cases := []result{
		{declErr(func() { offload.DeclareTarget("declare.counter", []int64{1}) }), `"declare.counter" is declared twice`},
		{declErr(func() { offload.DeclareTarget("declare.empty", []int64{}) }), "empty"},
		{declErr(func() { offload.DeclareTarget("", []int64{1}) }), "name is empty"},
		{declErr(func() { offload.DeclareTarget("declare.strings", []string{"x"}) }), "plain data"},
		{declErr(func() { offload.DeclareTargetLink("declare.overlap", overlap) }), `overlaps that of to variable "declare.counter"`},
	}
	for _, c := range cases {
		if !errors.Is(c.err, offload.ErrDeclareTarget) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("got %v, want ErrDeclareTarget saying %q", c.err, c.want)
		}
	}
	if err := declErr(func() { offload.DeclareTarget("declare.table", []float64{1}) }); !errors.Is(err, offload.ErrDeclareTarget) {
		t.Errorf("DeclareTarget of a name taken: panic %v, want an error wrapping ErrDeclareTarget", err)
	}

	start(t, offload.WithDevices("host"))
	err := declErr(func() { offload.DeclareTarget("declare.late", []int64{1}) })
	if !errors.Is(err, offload.ErrDeclareTarget) || !strings.Contains(err.Error(), `"declare.late"`) || !strings.Contains(err.Error(), "after offload.Start") {
		t.Fatalf("declaring while started: %v, want ErrDeclareTarget naming the variable", err)
	}
	err = declErr(func() { offload.DeclareTargetLink("declare.late_link", []int64{1}) })
	if !errors.Is(err, offload.ErrDeclareTarget) || !strings.Contains(err.Error(), `"declare.late_link"`) {
		t.Fatalf("declaring a link variable while started: %v", err)
	}
}

// declErr is the error that declare panics with, nil if it does not.
func declErr(declare func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err, _ = p.(error)
			if err == nil {
				err = fmt.Errorf("panic with a %T, not an error: %v", p, p)
			}
		}
	}()
	declare()
	return nil
}

// TestDeclareStopDrops: Stop leaves no bindings in this process (the host
// devices' and the initial device's copies are not kept).
func TestDeclareStopDrops(t *testing.T) {
	// Other tests of the binary may leave instances behind by design: a
	// host device whose kernel would not stop is abandoned at Stop, with
	// its pool (TestStopAfterRunawayKernel). Count this test's own.
	before := entries.GlobalInstances()
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		t.Fatal(err)
	}
	d := offload.On(1)
	declRun(t, d, declAdd, int64(1))
	if err := d.Data(func() error { return d.Run(declLinkAdd, int32(0)) }, offload.ToFrom(declLinked.Host())); err != nil {
		t.Fatal(err)
	}
	if n := entries.GlobalInstances() - before; n != 3 {
		t.Errorf("%d device instances with bindings while started, want 3 (two host devices and the initial device)", n)
	}
	if err := offload.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := entries.GlobalInstances() - before; n != 0 {
		t.Fatalf("%d device instances keep bindings after Stop", n)
	}
}

// TestDeclareLostDevice: a device process killed: constructs on it fail
// (nothing hangs), the other device keeps its copy, Stop returns.
func TestDeclareLostDevice(t *testing.T) {
	declCounter.Host()[0] = 3
	start(t, offload.WithDevices("local:2"))
	d0, d1 := offload.On(0), offload.On(1)
	declRun(t, d0, declAdd, int64(1))
	info, err := d1.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.EnterData(offload.To(declLinked.Host())); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var errs []error
	var mu sync.Mutex
	go func() {
		defer close(done)
		for _, f := range []func() error{
			func() error { return d1.Run(declAdd, int64(1)) },
			func() error { return d1.Run(declLinkAdd, int32(1)) },
			func() error { return d1.Update(offload.From(declCounter.Host())) },
		} {
			// The loss shows at the first operation after the link broke,
			// or at the next: retried until it does, for as long as a
			// loaded machine could need (the select below bounds it).
			var err error
			for deadline := time.Now().Add(20 * time.Second); err == nil && time.Now().Before(deadline); {
				err = f()
				if err == nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("constructs on a killed device hang")
	}
	for _, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "device 1") {
			t.Errorf("construct on the killed device: %v, want an error naming device 1", err)
		}
	}
	if v := readCounter(t, d0); v != 4 {
		t.Fatalf("device 0: counter %d, want 4", v)
	}
}

// The variables' host memory is the program's slices: not copied.
func TestDeclareHost(t *testing.T) {
	if unsafe.SliceData(declLinked.Host()) != &declLinkBacking[2] || declLinked.Name() != "declare.linked" || !declLinked.IsLink() || declCounter.IsLink() {
		t.Fatalf("Linked: %v", declLinked)
	}
	if s := declCounter.String(); s != `declare target to variable "declare.counter" ([]int64, 1 element)` {
		t.Fatalf("String: %s", s)
	}
}
