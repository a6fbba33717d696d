package offload_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/entries"
)

// Typed kernels: the map direction of each buffer is in its type.
var (
	// typedSaxpy reads x, updates y.
	typedSaxpy = offload.MustKernel3("typed.saxpy", func(ctx offload.Ctx, a float32, x offload.In[float32], y offload.InOut[float32]) {
		ctx.For(len(y), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				y[i] += a * x[i]
			}
		})
	})
	// typedScale writes out from in and scribbles on in (which must not
	// come back) and on its scratch.
	typedScale = offload.MustKernel4("typed.scale", func(ctx offload.Ctx, k int, in offload.In[int32], out offload.Out[int32], tmp offload.Scratch[int32]) {
		for i := range out {
			tmp[i] = in[i] * int32(k)
			out[i] = tmp[i]
			in[i] = -1
		}
	})
	typedNone = offload.MustKernel("typed.none", func(offload.Ctx) {})
)

func TestTypedKernels(t *testing.T) {
	start(t, offload.WithDevices("host,local"))
	for _, dev := range []offload.Device{offload.On(0), offload.On(1), offload.Initial()} {
		t.Run(fmt.Sprint(dev.Num()), func(t *testing.T) {
			x := []float32{1, 2, 3, 4}
			y := []float32{10, 20, 30, 40}
			if err := typedSaxpy.Run(dev, 2, x, y); err != nil {
				t.Fatal(err)
			}
			for i, want := range []float32{12, 24, 36, 48} {
				if y[i] != want {
					t.Fatalf("y = %v, want [12 24 36 48]", y)
				}
			}
			in := []int32{1, 2, 3}
			out := []int32{7, 7, 7}
			tmp := make([]int32, 3)
			if err := typedScale.Run(dev, 3, in, out, tmp); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(out) != "[3 6 9]" {
				t.Errorf("out = %v, want [3 6 9]", out)
			}
			if dev.IsInitial() {
				return // the initial device runs on the program's memory
			}
			if fmt.Sprint(in) != "[1 2 3]" || fmt.Sprint(tmp) != "[0 0 0]" {
				t.Errorf("in = %v, tmp = %v: an In and a Scratch buffer came back", in, tmp)
			}
			// Out is map(from:): the device copy starts uninitialized, so a
			// kernel that writes nothing still copies back device memory,
			// not the host's 7s: checked by the override below instead.
			if err := dev.Run(typedNone); err != nil {
				t.Fatal(err)
			}
			if offload.On(dev.Num()).IsPresent(x) || dev.IsPresent(out) {
				t.Errorf("buffers still mapped after the region")
			}
		})
	}
}

// With overrides the declared direction for one launch.
func TestTypedWith(t *testing.T) {
	start(t, offload.WithDevices("host"))
	dev := offload.On(0)
	in := []int32{1, 2, 3}
	out := []int32{7, 7, 7}
	tmp := make([]int32, 3)
	// in as tofrom: its -1s come back.
	err := typedScale.With(offload.ToFrom(in).Named("in")).Run(dev, 2, in, out, tmp)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(in) != "[-1 -1 -1]" || fmt.Sprint(out) != "[2 4 6]" {
		t.Errorf("in = %v, out = %v; want [-1 -1 -1] [2 4 6]", in, out)
	}
	// A clause for a buffer that is not an argument.
	other := []int32{1, 2, 3}
	err = typedScale.With(offload.To(other).Named("other")).Run(dev, 2, in, out, tmp)
	if !errors.Is(err, offload.ErrBadMap) || !strings.Contains(err.Error(), `"other"`) || !strings.Contains(err.Error(), "device 0") {
		t.Errorf("With(other) = %v, want ErrBadMap naming the device and \"other\"", err)
	}
	// Present: a buffer not mapped is refused.
	err = typedScale.With(offload.To(in).Present().Named("in")).Nowait(dev.Nowait(), 2, in, out, tmp).Wait()
	if !errors.Is(err, offload.ErrNotPresent) {
		t.Errorf("With(present) = %v, want ErrNotPresent", err)
	}
	// Inside a data region the typed launch finds its buffers present.
	err = dev.Data(func() error {
		if err := typedScale.Run(dev, 5, in, out, tmp); err != nil {
			return err
		}
		if fmt.Sprint(out) != "[2 4 6]" {
			return fmt.Errorf("out = %v before the region ended, want the old [2 4 6]", out)
		}
		return nil
	}, offload.To(in), offload.From(out), offload.Alloc(tmp))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out) != "[-5 -5 -5]" {
		t.Errorf("out = %v after the region, want [-5 -5 -5] (in was -1s)", out)
	}
}

// A launch whose arguments have the wrong types does not compile (go build
// -gcflags=-e lists every error): the
// program in testdata/typecheck passes an int32 where the kernel takes an
// int and a []float64 where it takes In[float32].
func TestTypedLaunchIsCompileChecked(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	goBin, err := exec.LookPath("go") // go test puts its own go first on PATH
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "build", "-gcflags=-e", "-o", os.DevNull, "./testdata/typecheck")
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("go build ./testdata/typecheck succeeded; want type errors\n%s", out)
	}
	for _, want := range []string{
		"cannot use n (variable of type int32) as int value in argument to Scale.Run",
		"cannot use x64 (variable of type []float64) as offload.In[float32] value in argument to Saxpy.Run",
		"cannot use 0.5 (untyped float constant) as int value in argument to Scale.Nowait",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("go build output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "main.go:17:") {
		t.Errorf("the correct launch on line 17 is an error:\n%s", out)
	}
}

// A kernel registered while the runtime is started is refused at once:
// the devices loaded the table at Start.
func TestKernelAfterStart(t *testing.T) {
	start(t, offload.WithDevices("host"))
	k, err := offload.NewKernel("typed.late", func(x []int32) {})
	if k != nil || !errors.Is(err, offload.ErrKernelSignature) || !strings.Contains(err.Error(), `kernel "typed.late" registered after offload.Start`) {
		t.Fatalf("NewKernel after Start = %v, %v; want an error naming the kernel and Start", k, err)
	}
	func() {
		defer func() {
			err, _ := recover().(error)
			if !errors.Is(err, offload.ErrKernelSignature) {
				t.Fatalf("MustKernel1 after Start panicked with %v; want an error wrapping ErrKernelSignature", err)
			}
		}()
		offload.MustKernel1("typed.late1", func(offload.Ctx, []int32) {})
	}()
}

// Named gives a typed kernel's buffers their names in info output and
// errors; a With clause's own name wins.
func TestTypedNamed(t *testing.T) {
	var info strings.Builder
	start(t, offload.WithDevices("host"), offload.WithInfo("kernel-args", &info))
	k := typedSaxpy.Named("a", "x", "y")
	x, y := []float32{1}, []float32{2}
	if err := k.Run(offload.On(0), 1, x, y); err != nil {
		t.Fatal(err)
	}
	if err := k.With(offload.ToFrom(y).Named("why")).Run(offload.On(0), 1, x, y); err != nil {
		t.Fatal(err)
	}
	if err := offload.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"to(x)[4]", "tofrom(y)[4]", "tofrom(why)[4]"} {
		if !strings.Contains(info.String(), want) {
			t.Errorf("info output lacks %q:\n%s", want, info.String())
		}
	}
	if err := offload.Start(offload.WithDevices("host")); err != nil { // for start's cleanup
		t.Fatal(err)
	}
}

var typedPanics = offload.MustKernel2("typed.panics", func(ctx offload.Ctx, how int, x offload.InOut[int32]) {
	switch how {
	case 1:
		panic("typed boom")
	case 2:
		runtime.Goexit()
	case 3:
		ctx.For(len(x), func(lo, hi int) { panic("typed chunk boom") })
	}
	x[0] = 7
})

// A typed kernel is called without reflection on host devices and device
// processes: panics, runtime.Goexit and chunk panics still become
// *KernelPanic errors, and the device goes on.
func TestTypedKernelFailures(t *testing.T) {
	start(t, offload.WithDevices("host,local"))
	for _, dev := range []offload.Device{offload.On(0), offload.On(1)} {
		x := []int32{0, 0}
		for how, want := range []string{"", "typed boom", "Goexit", "typed chunk boom"} {
			err := typedPanics.Run(dev, how, x)
			if how == 0 {
				if err != nil || x[0] != 7 {
					t.Fatalf("device %d: %v, x = %v", dev.Num(), err, x)
				}
				continue
			}
			var kp *offload.KernelPanic
			if !errors.Is(err, offload.ErrKernelFailed) || !errors.As(err, &kp) || !strings.Contains(err.Error(), want) {
				t.Errorf("device %d, case %d: %v, want a KernelPanic with %q", dev.Num(), how, err, want)
			}
		}
	}
}

var typedWithPTX = offload.MustKernel2("typed.withptx", func(ctx offload.Ctx, n int, x offload.InOut[float32]) {
	for i := range x {
		x[i]++
	}
}).PTX([]byte(".version 7.0\n.target sm_50\n.address_size 64\n"), "withptx")

// A kernel's PTX is registered with it and travels in the kernel table;
// the Go body still runs on CPU devices; device code cannot be added while
// the runtime is started.
func TestKernelPTXRegistration(t *testing.T) {
	k, ok := entries.LookupKernel("typed.withptx")
	if !ok {
		t.Fatal("typed.withptx is not registered")
	}
	c, ok := k.Code("ptx")
	if !ok || c.Entry != "withptx" || !strings.HasPrefix(string(c.Image), ".version 7.0") {
		t.Fatalf("Code[ptx] = %+v, %v", c, ok)
	}
	start(t, offload.WithDevices("host"))
	x := []float32{1}
	if err := typedWithPTX.Run(offload.On(0), 1, x); err != nil || x[0] != 2 {
		t.Fatalf("Run on a host device: %v, x = %v", err, x)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "registered after offload.Start") {
				t.Errorf("PTX after Start: recovered %v, want a panic saying the table is sealed", r)
			}
		}()
		typedWithPTX.PTX([]byte("x"), "y")
	}()
	if c, ok := k.Code("ptx"); !ok || c.Entry != "withptx" {
		t.Error("the refused PTX replaced the registered one")
	}
}
