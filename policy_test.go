package offload_test

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/plugin"
)

// A device kind whose devices cannot be opened, like a remote machine that
// does not answer.
func init() {
	plugin.RegisterKind(plugin.Kind{
		Name: "broken",
		Open: func(arg string) ([]plugin.Device, error) {
			return nil, fmt.Errorf("connection refused (test kind %q)", arg)
		},
		Order: 1000,
		Help:  "broken  a test kind that never opens",
	})
}

// syncBuffer is an io.Writer safe for the runtime's concurrent info output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var WhereAmI = offload.MustKernel("test.whereami", func(ctx offload.Ctx, out []int64) {
	out[0] = int64(ctx.Device())
	out[1] = int64(ctx.Cores())
})

func TestOffloadMandatory(t *testing.T) {
	start(t, offload.WithDevices("host:2"), offload.WithOffload("MANDATORY"))
	if n := offload.NumDevices(); n != 2 {
		t.Fatalf("NumDevices = %d, want 2", n)
	}
	for _, num := range []int{-1, 3, 7} {
		err := offload.On(num).Run(Fill, int32(1), make([]int32, 4))
		if !errors.Is(err, offload.ErrNoDevice) || !strings.Contains(err.Error(), fmt.Sprintf("device number %d", num)) ||
			!strings.Contains(err.Error(), "devices are 0 to 1, and 2 is the initial device") {
			t.Errorf("device %d: got %v, want ErrNoDevice naming the number and the valid ones", num, err)
		}
		if err := offload.On(num).EnterData(offload.To(make([]int32, 4))); !errors.Is(err, offload.ErrNoDevice) {
			t.Errorf("enter data on device %d: got %v, want ErrNoDevice", num, err)
		}
	}
	// Device 1 runs its own kernels, the initial device (2) runs on the host.
	for num, want := range map[int]int64{0: 0, 1: 1, 2: 2} {
		out := make([]int64, 2)
		if err := offload.On(num).Run(WhereAmI, out); err != nil {
			t.Fatal(err)
		}
		if out[0] != want || out[1] < 1 {
			t.Errorf("device %d: kernel saw device %d with %d cores", num, out[0], out[1])
		}
	}
	if !offload.On(2).IsInitial() || offload.On(1).IsInitial() {
		t.Error("IsInitial is wrong")
	}
}

func TestOffloadMandatoryUnavailableDevice(t *testing.T) {
	err := offload.Start(offload.WithDevices("host,broken:x"), offload.WithOffload("MANDATORY"))
	if err == nil {
		offload.Stop()
		t.Fatal("Start succeeded with an unavailable device under MANDATORY")
	}
	if !errors.Is(err, offload.ErrMandatory) || !strings.Contains(err.Error(), "device 1 (broken)") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("got %v, want ErrMandatory naming device 1 and the cause", err)
	}
	// Nothing is left started.
	if err := offload.Run(Nop); !errors.Is(err, offload.ErrNotStarted) {
		t.Errorf("after a failed Start: %v, want ErrNotStarted", err)
	}
}

func TestOffloadDefaultFallsBack(t *testing.T) {
	var info syncBuffer
	start(t, offload.WithDevices("host,broken:x"), offload.WithOffload("DEFAULT"),
		offload.WithInfo("offload,kernels", &info))
	if n := offload.NumDevices(); n != 2 {
		t.Fatalf("NumDevices = %d, want 2 (the broken device keeps its number)", n)
	}
	if _, err := offload.On(1).Info(); !errors.Is(err, offload.ErrUnavailable) || errors.Is(err, offload.ErrMandatory) || strings.Contains(err.Error(), "mandatory") {
		t.Errorf("Info of the unavailable device under DEFAULT: %v, want ErrUnavailable, not the MANDATORY policy's error", err)
	}
	for _, num := range []int{1, 9} {
		x := filled(8, 0)
		out := make([]int64, 2)
		if err := offload.On(num).Run(WhereAmI, out); err != nil {
			t.Fatalf("device %d: %v", num, err)
		}
		if out[0] != 2 {
			t.Errorf("device %d: kernel ran on device %d, want the initial device 2", num, out[0])
		}
		// Data constructs fall back too: the initial device shares host memory.
		if err := offload.On(num).EnterData(offload.To(x)); err != nil {
			t.Fatal(err)
		}
		if err := offload.On(num).Run(Fill, int32(4), offload.To(x)); err != nil {
			t.Fatal(err)
		}
		if !allEqual(x, 4) {
			t.Errorf("device %d: fallback kernel did not write host memory: %v", num, x)
		}
	}
	out := info.String()
	for _, want := range []string{
		"goffload device 1 info: unavailable (cannot open \"broken:x\": connection refused",
		"running on the initial device",
		"goffload device 9 info: no such device: device number 9",
		"Running kernel test.whereami on initial device 2 (host fallback)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("info output lacks %q:\n%s", want, out)
		}
	}
	// Device 0 still offloads.
	res := make([]int64, 2)
	if err := offload.On(0).Run(WhereAmI, res); err != nil || res[0] != 0 {
		t.Errorf("device 0: %v, ran on %d", err, res[0])
	}
}

func TestOffloadDisabled(t *testing.T) {
	t.Setenv("OMP_TARGET_OFFLOAD", "disabled")
	start(t, offload.WithDevices("host:2"))
	if n := offload.NumDevices(); n != 0 {
		t.Fatalf("NumDevices = %d, want 0 under DISABLED", n)
	}
	for _, num := range []int{0, 1, 5} {
		d := offload.On(num)
		x := filled(4, 1)
		if err := d.EnterData(offload.To(x)); err != nil {
			t.Fatal(err)
		}
		if err := d.Run(Fill, int32(num+2), offload.To(x)); err != nil {
			t.Fatal(err)
		}
		// On the initial device a kernel works on the program's memory.
		if !allEqual(x, int32(num+2)) || !d.IsPresent(x) {
			t.Errorf("device %d: x = %v, present %v", num, x, d.IsPresent(x))
		}
		out := make([]int64, 2)
		if err := d.Run(WhereAmI, out); err != nil || out[0] != 0 {
			t.Errorf("device %d: ran on %d (%v), want initial device 0", num, out[0], err)
		}
	}
}

func TestStartErrors(t *testing.T) {
	err := offload.Start(offload.WithDevices("host,bogus:3"))
	if err == nil {
		offload.Stop()
		t.Fatal("unknown kind accepted")
	}
	if !errors.Is(err, offload.ErrConfig) || !strings.Contains(err.Error(), `"bogus"`) || !strings.Contains(err.Error(), "host[:N]") {
		t.Errorf("unknown kind: %v, want ErrConfig naming it and listing the known kinds", err)
	}
	for env, val := range map[string]string{"OMP_TARGET_OFFLOAD": "sometimes", "OMP_DEFAULT_DEVICE": "-2", "GOFFLOAD_INFO": "colours"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, val)
			err := offload.Start(offload.WithDevices("host"))
			if err == nil {
				offload.Stop()
				t.Fatalf("%s=%s accepted", env, val)
			}
			if !errors.Is(err, offload.ErrConfig) || !strings.Contains(err.Error(), env) {
				t.Errorf("%s=%s: %v, want ErrConfig naming the variable", env, val, err)
			}
		})
	}
	if err := offload.Start(offload.WithDevices("host:x")); err == nil || !strings.Contains(err.Error(), "host:x") {
		offload.Stop()
		t.Errorf("host:x: %v", err)
	}
	start(t, offload.WithDevices("host"))
	if err := offload.Start(); !errors.Is(err, offload.ErrConfig) {
		t.Errorf("second Start: %v", err)
	}
}

func TestNotStarted(t *testing.T) {
	if err := offload.Run(Nop); !errors.Is(err, offload.ErrNotStarted) {
		t.Errorf("Run before Start: %v", err)
	}
	if err := offload.EnterData(offload.To(make([]int32, 2))); !errors.Is(err, offload.ErrNotStarted) {
		t.Errorf("EnterData before Start: %v", err)
	}
	if _, err := offload.On(0).Info(); !errors.Is(err, offload.ErrNotStarted) {
		t.Errorf("Info before Start: %v", err)
	}
}

func TestDefaultDeviceFromEnv(t *testing.T) {
	t.Setenv("OMP_DEFAULT_DEVICE", "1")
	t.Setenv("GOFFLOAD_DEVICES", "host:2")
	start(t)
	if offload.Default().Num() != 1 {
		t.Fatalf("Default() = %d, want 1", offload.Default().Num())
	}
	out := make([]int64, 2)
	if err := offload.Run(WhereAmI, out); err != nil || out[0] != 1 {
		t.Errorf("Run on the default device ran on %d (%v)", out[0], err)
	}
}

// TestInfoOutput checks the lines GOFFLOAD_INFO prints against the ones
// libomptarget users know, each naming its construct's task number (the
// three constructs are numbered 1, 2, 3).
func TestInfoOutput(t *testing.T) {
	var info syncBuffer
	start(t, offload.WithDevices("host"), offload.WithInfo("all", &info))
	x := make([]float32, 1024)
	if err := offload.EnterData(offload.To(x).Named("x")); err != nil {
		t.Fatal(err)
	}
	if err := offload.Run(Scale, float32(2), x); err != nil {
		t.Fatal(err)
	}
	if err := offload.ExitData(offload.From(x).Named("x")); err != nil {
		t.Fatal(err)
	}
	hex := `0x[0-9a-f]+`
	for _, re := range []string{
		`goffload device 0 info: task 1: Creating new map entry with HstPtrBegin=` + hex + `, TgtPtrBegin=` + hex + `, Size=4096, DynRefCount=1, HoldRefCount=0, Name=x`,
		`goffload device 0 info: task 1: Copying data from host to device, HstPtr=` + hex + `, TgtPtr=` + hex + `, Size=4096, Name=x`,
		`goffload device 0 info: task 2: Entering kernel test.scale with 2 arguments:`,
		`goffload device 0 info: task 2: firstprivate\(arg0\)\[4\]`,
		`goffload device 0 info: task 2: tofrom\(test.scale.arg1\)\[4096\] \(implicit\)`,
		`goffload device 0 info: task 2: Mapping exists \(implicit\) with HstPtrBegin=` + hex + `, TgtPtrBegin=` + hex + `, Size=4096, DynRefCount=2 \(incremented\), HoldRefCount=0, Name=test.scale.arg1`,
		`goffload device 0 info: task 2: Launching kernel test.scale on device 0 \(host\)`,
		`goffload device 0 info: task 3: Copying data from device to host, TgtPtr=` + hex + `, HstPtr=` + hex + `, Size=4096, Name=x`,
		`goffload device 0 info: task 3: Removing map entry with HstPtrBegin=` + hex + `, TgtPtrBegin=` + hex + `, Size=4096, Name=x`,
	} {
		if !regexp.MustCompile(re).MatchString(info.String()) {
			t.Errorf("info output lacks %s:\n%s", re, info.String())
		}
	}
	if x[5] != 0 {
		t.Errorf("x[5] = %v, want 0 (scaled zeros)", x[5])
	}
}

var Scale = offload.MustKernel("test.scale", func(a float32, x []float32) {
	for i := range x {
		x[i] *= a
	}
})
