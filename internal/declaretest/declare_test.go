package declaretest_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/entries"
)

// The device processes that tests start (local:N) are this test binary.
func TestMain(m *testing.M) {
	offload.ServeDevice()
	os.Exit(m.Run())
}

// The declare target variables of the tests, declared at package init like
// kernels: device processes declare them too, in the same order.
var (
	// Counter is a scalar "to" variable: every device has its own.
	Counter = offload.DeclareTarget("declare.counter", []int64{7})
	// Table is a "to" variable of several elements.
	Table = offload.DeclareTarget("declare.table", []float64{1, 2, 3, 4, 5})
	// Linked is a "link" variable, a section of linkBacking (mapping the
	// whole backing array maps it too).
	linkBacking = make([]int32, 12)
	Linked      = offload.DeclareTargetLink("declare.linked", linkBacking[2:10])
)

var (
	// Read writes the device's counter and number to out.
	Read = offload.MustKernel("declare.read", func(ctx offload.Ctx, out []int64) {
		out[0] = Counter.On(ctx)[0]
		out[1] = int64(ctx.Device())
	})
	Add = offload.MustKernel("declare.add", func(ctx offload.Ctx, v int64) {
		Counter.On(ctx)[0] += v
	})
	// Same reports whether x, mapped as a kernel argument, is the device's
	// copy of Counter.
	Same = offload.MustKernel("declare.same", func(ctx offload.Ctx, x []int64, out []int64) {
		out[0] = 0
		if &x[0] == &Counter.On(ctx)[0] {
			out[0] = 1
		}
	})
	Scale = offload.MustKernel("declare.scale", func(ctx offload.Ctx, f float64) {
		t := Table.On(ctx)
		ctx.For(len(t), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				t[i] *= f
			}
		})
	})
	LinkAdd = offload.MustKernel("declare.link_add", func(ctx offload.Ctx, v int32) {
		l := Linked.On(ctx)
		for i := range l {
			l[i] += v
		}
	})
	// LinkArg adds v through the variable and checks that x, the slice
	// mapped as its argument, is the same memory.
	LinkArg = offload.MustKernel("declare.link_arg", func(ctx offload.Ctx, v int32, x []int32) {
		l := Linked.On(ctx)
		if &l[0] != &x[0] {
			panic("the link variable is not the mapped argument")
		}
		for i := range l {
			l[i] += v
		}
	})
)

// start starts the runtime for one test and stops it at the end.
func start(t testing.TB, opts ...offload.Option) {
	t.Helper()
	if err := offload.Start(opts...); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := offload.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

// configs are the device sets every test runs on: devices in this process,
// device processes, and none (the initial device only).
var configs = []struct {
	name string
	opt  offload.Option
}{
	{"host:2", offload.WithDevices("host:2")},
	{"local:2", offload.WithDevices("local:2")},
	{"initial", offload.WithOffload("DISABLED")},
}

// devices is every device, the initial one last.
func devices() []offload.Device {
	var ds []offload.Device
	for i := 0; i <= offload.NumDevices(); i++ {
		ds = append(ds, offload.On(i))
	}
	return ds
}

// read returns the counter of dev, checking where the kernel ran.
func read(t *testing.T, dev offload.Device) int64 {
	t.Helper()
	out := make([]int64, 2)
	if err := dev.Run(Read, offload.From(out)); err != nil {
		t.Fatalf("%v: Read: %v", dev, err)
	}
	if out[1] != int64(dev.Num()) {
		t.Fatalf("%v: the kernel ran on device %d", dev, out[1])
	}
	return out[0]
}

func run(t *testing.T, dev offload.Device, k *offload.Kernel, args ...any) {
	t.Helper()
	if err := dev.Run(k, args...); err != nil {
		t.Fatalf("%v: %s: %v", dev, k.Name(), err)
	}
}

func update(t *testing.T, dev offload.Device, m ...offload.Map) {
	t.Helper()
	if err := dev.Update(m...); err != nil {
		t.Fatalf("%v: Update: %v", dev, err)
	}
}

// TestDeclareTo: every device has its own copy of a "to" variable, made from
// the host value at Start; kernels read and write the copy of their device;
// Update moves it; it is a present-table entry that map clauses find.
func TestDeclareTo(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			Counter.Host()[0] = 7
			copy(Table.Host(), []float64{1, 2, 3, 4, 5})
			start(t, c.opt)
			devs := devices()
			n := len(devs) - 1
			for _, d := range devs {
				if v := read(t, d); v != 7 {
					t.Fatalf("%v: counter %d at Start, want the host value 7", d, v)
				}
			}
			for _, d := range devs[:n] {
				run(t, d, Add, int64(10*(d.Num()+1)))
			}
			for _, d := range devs[:n] {
				if v, want := read(t, d), 7+int64(10*(d.Num()+1)); v != want {
					t.Errorf("%v: counter %d, want %d (each device has its own copy)", d, v, want)
				}
			}
			if Counter.Host()[0] != 7 {
				t.Fatalf("host counter %d after device writes, want 7", Counter.Host()[0])
			}
			// The initial device's copy is the host's.
			run(t, offload.Initial(), Add, int64(1))
			if Counter.Host()[0] != 8 {
				t.Fatalf("host counter %d after a kernel on the initial device added 1 to 7", Counter.Host()[0])
			}
			if n == 0 {
				return
			}
			// target update from: the last device's copy comes back.
			last := devs[n-1]
			update(t, last, offload.From(Counter.Host()))
			if want := 7 + int64(10*n); Counter.Host()[0] != want {
				t.Fatalf("host counter %d after Update(From) from %v, want %d", Counter.Host()[0], last, want)
			}
			// target update to: a new host value goes to one device only.
			Counter.Host()[0] = 100
			update(t, devs[0], offload.To(Counter.Host()))
			if v := read(t, devs[0]); v != 100 {
				t.Fatalf("%v: counter %d after Update(To) of 100", devs[0], v)
			}
			if v := read(t, devs[1]); v != 27 {
				t.Fatalf("%v: counter %d after Update(To) on device 0, want its own 27", devs[1], v)
			}
			for _, d := range devs[:n] {
				// Present, with an infinite count: the argument is the copy
				// itself, never copied in or out, and never removed.
				if !d.IsPresent(Counter.Host()) {
					t.Fatalf("%v: the variable is not present", d)
				}
				out := make([]int64, 1)
				before := read(t, d)
				Counter.Host()[0] = -1
				run(t, d, Same, Counter.Host(), offload.From(out))
				run(t, d, Same, offload.ToFrom(Counter.Host()), offload.From(out))
				if out[0] != 1 {
					t.Fatalf("%v: a mapped argument of the variable's host slice is not its device copy", d)
				}
				if Counter.Host()[0] != -1 || read(t, d) != before {
					t.Fatalf("%v: mapping the variable copied it (host %d, device %d, was %d)", d, Counter.Host()[0], read(t, d), before)
				}
				if err := d.ExitData(offload.Delete(Counter.Host())); err != nil {
					t.Fatalf("%v: ExitData(Delete): %v", d, err)
				}
				if !d.IsPresent(Counter.Host()) || read(t, d) != before {
					t.Fatalf("%v: ExitData(Delete) removed the variable", d)
				}
				err := d.Disassociate(Counter.Host())
				if !errors.Is(err, offload.ErrBadArgument) || !strings.Contains(err.Error(), `"declare.counter"`) {
					t.Fatalf("%v: Disassociate of the variable: %v, want ErrBadArgument naming it", d, err)
				}
			}
			// A vector variable, split over the device's cores.
			for _, d := range devs[:n] {
				run(t, d, Scale, float64(d.Num()+2))
			}
			for _, d := range devs[:n] {
				update(t, d, offload.From(Table.Host()))
				for i, v := range Table.Host() {
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
	for i, c := range configs[:2] {
		t.Run(c.name, func(t *testing.T) {
			for round := int64(0); round < 2; round++ {
				Counter.Host()[0] = 40 + round + int64(i)
				if err := offload.Start(c.opt); err != nil {
					t.Fatal(err)
				}
				d := offload.On(1)
				if v := read(t, d); v != 40+round+int64(i) {
					offload.Stop()
					t.Fatalf("round %d: counter %d, want the host value %d", round, v, 40+round+int64(i))
				}
				run(t, d, Add, int64(1000))
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
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			h := Linked.Host()
			for i := range h {
				h[i] = int32(i + 1)
			}
			start(t, c.opt)
			devs := devices()
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
			run(t, offload.Initial(), LinkAdd, int32(1))
			check("initial device", 1)
			for _, d := range devs[:n] {
				notMapped := func(when string) {
					t.Helper()
					err := d.Run(LinkAdd, int32(1))
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
				run(t, d, LinkAdd, int32(10))
				check("after a kernel, before Update", 0)
				update(t, d, offload.From(h))
				check("Update(From)", 10)
				if err := d.ExitData(offload.Release(h)); err != nil {
					t.Fatal(err)
				}
				notMapped("after ExitData")
				// A data region; then a map clause of the kernel itself.
				err := d.Data(func() error { return d.Run(LinkAdd, int32(100)) }, offload.ToFrom(h))
				if err != nil {
					t.Fatal(err)
				}
				check("target data", 110)
				run(t, d, LinkArg, int32(1000), offload.ToFrom(h))
				check("map clause", 1110)
				// A mapping of a slice that contains the variable.
				if err := d.EnterData(offload.To(linkBacking)); err != nil {
					t.Fatal(err)
				}
				run(t, d, LinkAdd, int32(-1110))
				if err := d.ExitData(offload.From(linkBacking)); err != nil {
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
	for _, c := range configs[:2] {
		t.Run(c.name, func(t *testing.T) {
			h := Linked.Host()
			for i := range h {
				h[i] = 0
			}
			start(t, c.opt)
			const rounds = 20
			dep := offload.DependInOut(h)
			for r := 0; r < rounds; r++ {
				d := offload.On(r % 2)
				d.Nowait(dep).EnterData(offload.To(h))
				d.Nowait(dep).Run(LinkAdd, int32(1))
				if r%3 == 0 { // a task that maps it for itself
					d.Nowait(dep).Run(LinkArg, int32(1), offload.ToFrom(h))
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
	start(t, offload.WithDevices("host"), offload.WithInfo("mapping"), offload.WithInfoOutput(&info))
	d := offload.On(0)
	if err := d.Data(func() error { return d.Run(LinkAdd, int32(0)) }, offload.ToFrom(Linked.Host())); err != nil {
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
	var overlap = Counter.Host()
	cases := []result{
		{err2(offload.NewDeclareTarget("declare.counter", []int64{1})), `"declare.counter" is declared twice`},
		{err2(offload.NewDeclareTarget("declare.empty", []int64{})), "empty"},
		{err2(offload.NewDeclareTarget("", []int64{1})), "name is empty"},
		{err2(offload.NewDeclareTarget("declare.strings", []string{"x"})), "plain data"},
		{err2(offload.NewDeclareTargetLink("declare.overlap", overlap)), `overlaps that of to variable "declare.counter"`},
	}
	for _, c := range cases {
		if !errors.Is(c.err, offload.ErrDeclareTarget) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("got %v, want ErrDeclareTarget saying %q", c.err, c.want)
		}
	}
	func() {
		defer func() {
			err, _ := recover().(error)
			if !errors.Is(err, offload.ErrDeclareTarget) {
				t.Errorf("DeclareTarget of a name taken: panic %v, want an error wrapping ErrDeclareTarget", err)
			}
		}()
		offload.DeclareTarget("declare.table", []float64{1})
	}()

	start(t, offload.WithDevices("host"))
	_, err := offload.NewDeclareTarget("declare.late", []int64{1})
	if !errors.Is(err, offload.ErrDeclareTarget) || !strings.Contains(err.Error(), `"declare.late"`) || !strings.Contains(err.Error(), "after offload.Start") {
		t.Fatalf("declaring while started: %v, want ErrDeclareTarget naming the variable", err)
	}
	_, err = offload.NewDeclareTargetLink("declare.late_link", []int64{1})
	if !errors.Is(err, offload.ErrDeclareTarget) || !strings.Contains(err.Error(), `"declare.late_link"`) {
		t.Fatalf("declaring a link variable while started: %v", err)
	}
}

func err2[T any](_ T, err error) error { return err }

// TestDeclareStopDrops: Stop leaves no bindings in this process (the host
// devices' and the initial device's copies are not kept).
func TestDeclareStopDrops(t *testing.T) {
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		t.Fatal(err)
	}
	d := offload.On(1)
	run(t, d, Add, int64(1))
	if err := d.Data(func() error { return d.Run(LinkAdd, int32(0)) }, offload.ToFrom(Linked.Host())); err != nil {
		t.Fatal(err)
	}
	if n := entries.GlobalInstances(); n != 3 {
		t.Errorf("%d device instances with bindings while started, want 3 (two host devices and the initial device)", n)
	}
	if err := offload.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := entries.GlobalInstances(); n != 0 {
		t.Fatalf("%d device instances keep bindings after Stop", n)
	}
}

// TestDeclareLostDevice: a device process killed: constructs on it fail
// (nothing hangs), the other device keeps its copy, Stop returns.
func TestDeclareLostDevice(t *testing.T) {
	Counter.Host()[0] = 3
	start(t, offload.WithDevices("local:2"))
	d0, d1 := offload.On(0), offload.On(1)
	run(t, d0, Add, int64(1))
	info, err := d1.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.EnterData(offload.To(Linked.Host())); err != nil {
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
			func() error { return d1.Run(Add, int64(1)) },
			func() error { return d1.Run(LinkAdd, int32(1)) },
			func() error { return d1.Update(offload.From(Counter.Host())) },
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
	if v := read(t, d0); v != 4 {
		t.Fatalf("device 0: counter %d, want 4", v)
	}
}

// The variables' host memory is the program's slices: not copied.
func TestDeclareHost(t *testing.T) {
	if unsafe.SliceData(Linked.Host()) != &linkBacking[2] || Linked.Name() != "declare.linked" || !Linked.IsLink() || Counter.IsLink() {
		t.Fatalf("Linked: %v", Linked)
	}
	if s := Counter.String(); s != `declare target to variable "declare.counter" ([]int64, 1 element)` {
		t.Fatalf("String: %s", s)
	}
}
