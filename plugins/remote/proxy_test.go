package remote_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/opencltest"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"

	_ "github.com/goffload/offload/plugins/host" // served by proxying device processes
	"github.com/goffload/offload/plugins/opencl"
)

// envEmulate, set to 1 in a device process (this test binary), makes its
// OpenCL devices run the Go bodies of the suite's kernels without OpenCL C
// (opencl.UseEmulationForTests), as the opencl kind's own suite runs them.
const envEmulate = "GOFFLOAD_TEST_OPENCL_EMULATION"

func init() {
	if os.Getenv(envEmulate) == "1" {
		opencl.UseEmulationForTests()
	}
}

// openProxied opens the local devices spec names (local:N[KIND]) and
// loads them as devices 0..N-1.
func openProxied(t testing.TB, arg string) []plugin.Device {
	t.Helper()
	k, _ := plugin.LookupKind("local")
	devs, err := k.Open(arg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range devs {
			d.Close()
		}
	})
	for i, d := range devs {
		if err := d.Load(entries.Current(), i); err != nil {
			t.Fatal(err)
		}
	}
	return devs
}

// TestProxyConformance: the conformance suite on devices of other kinds
// that local device processes serve: host devices (Go bodies in the
// device process, through the host kind's contract) and PoCL's OpenCL
// device (OpenCL C), one and two processes.
func TestProxyConformance(t *testing.T) {
	for _, kind := range []string{"host", "opencl"} {
		t.Run(kind, func(t *testing.T) {
			if kind == "opencl" {
				opencltest.Need(t)
				t.Setenv(envEmulate, "1")
			}
			plugintest.Run(t, func(t *testing.T) []plugin.Device {
				k, _ := plugin.LookupKind("local")
				devs, err := k.Open("2[" + kind + "]")
				if err != nil {
					t.Fatal(err)
				}
				return devs
			})
		})
	}
}

// TestProxyInfo: a proxied device says which process, machine and kind
// it is, and its errors name it.
func TestProxyInfo(t *testing.T) {
	opencltest.Need(t)
	d := openProxied(t, "1[opencl]")[0]
	in := d.Info()
	host, _ := os.Hostname()
	if in.Kind != "local" || in.Serves != "opencl" || in.PID == os.Getpid() || in.PID == 0 || in.Host != host || in.Name == "" {
		t.Errorf("info = %+v; want kind local serving opencl, another pid, this host", in)
	}
	_, err := d.Alloc(-1)
	if err == nil || !strings.Contains(err.Error(), "opencl") || !strings.Contains(err.Error(), "local device 0") {
		t.Errorf("bad alloc: %v; want an error naming local device 0 and opencl", err)
	}
}

// TestProxyBadSpec: malformed brackets and kinds that cannot be served
// are refused at Open, naming the item.
func TestProxyBadSpec(t *testing.T) {
	k, _ := plugin.LookupKind("local")
	for _, arg := range []string{"1[", "1[]", "1]", "[opencl", "1[opencl]x", "1[local]", "1[tcp:1]", "1[nosuchkind]", "x[host]"} {
		if _, err := k.Open(arg); !errors.Is(err, plugin.ErrBadSpec) || !strings.Contains(err.Error(), "local:") {
			t.Errorf("local:%s: %v; want ErrBadSpec naming it", arg, err)
		}
	}
}

// TestProxyTCP: a TCP device process whose own GOFFLOAD_DEVICES names two
// OpenCL devices (PoCL's, twice) gives a host that names it once two
// devices, one session each, and the conformance suite passes on them.
func TestProxyTCP(t *testing.T) {
	opencltest.Need(t)
	const secret = "proxy-s3cret-0123456789"
	addr, _ := startTCPDevice(t, secret, "GOFFLOAD_DEVICES=opencl:0,opencl:0", envEmulate+"=1")
	t.Setenv("GOFFLOAD_SECRET", secret)
	plugintest.Run(t, func(t *testing.T) []plugin.Device {
		k, _ := plugin.LookupKind("tcp")
		devs, err := k.Open(addr)
		if err != nil {
			t.Fatal(err)
		}
		if len(devs) != 2 {
			t.Fatalf("tcp://%s gave %d devices, want the 2 its process serves", addr, len(devs))
		}
		return devs
	})
}

// TestProxyFaults: a kernel without OpenCL C on a proxied OpenCL device
// fails naming the device and the kernel (and CanLaunch says so first);
// a device process killed while its kernel runs fails the queue with
// ErrDeviceLost naming the device, without a hang.
func TestProxyFaults(t *testing.T) {
	opencltest.Need(t)
	t.Run("no OpenCL C", func(t *testing.T) {
		d := openProxied(t, "1[opencl]")[0]
		kc, ok := d.(plugin.KernelChecker)
		if !ok {
			t.Fatal("a proxied device is no plugin.KernelChecker")
		}
		if err := kc.CanLaunch(addK); err == nil || !strings.Contains(err.Error(), "remotetest.add") {
			t.Errorf("CanLaunch(remotetest.add) = %v, want why not", err)
		}
		p, err := d.Alloc(8)
		if err != nil {
			t.Fatal(err)
		}
		q, err := d.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		if err := q.Launch(addK, []plugin.Arg{{Scalar: 1.0}, {Ptr: p, Len: 1}}); err != nil {
			t.Fatal(err)
		}
		err = q.Synchronize()
		for _, want := range []string{"local device 0", "opencl", "remotetest.add", "OpenCL C"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("launch without OpenCL C: %v; want an error saying %q", err, want)
			}
		}
		// The device goes on.
		if err := q.Submit(p, make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
		if err := q.Synchronize(); err != nil {
			t.Errorf("after the failure: %v", err)
		}
	})
	t.Run("killed", func(t *testing.T) {
		t.Setenv(envEmulate, "1")
		d := openProxied(t, "1[opencl]")[0]
		q, err := d.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Launch(sleepK, []plugin.Arg{{Scalar: int64(20_000)}}); err != nil {
			t.Fatal(err)
		}
		ev, err := d.NewEvent()
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Record(ev); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(d.Info().PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = ev.Synchronize()
		if !errors.Is(err, plugin.ErrDeviceLost) || !strings.Contains(err.Error(), "local device 0") || !strings.Contains(err.Error(), "opencl") {
			t.Errorf("killed mid-kernel: %v; want ErrDeviceLost naming local device 0 (opencl)", err)
		}
		if time.Since(start) > 10*time.Second {
			t.Errorf("the loss took %v to show", time.Since(start))
		}
		if err := q.Synchronize(); !errors.Is(err, plugin.ErrDeviceLost) {
			t.Errorf("queue after the loss: %v", err)
		}
	})
}

// TestProxySiblings: two devices that one TCP device process serves copy
// to each other and wait on each other's events inside that process (the
// host introduces their sessions): Exchange is accepted, not refused as
// between processes of another machine, and the data arrives.
func TestProxySiblings(t *testing.T) {
	opencltest.Need(t)
	const secret = "siblings-s3cret-0123456789"
	addr, _ := startTCPDevice(t, secret, "GOFFLOAD_DEVICES=opencl:0+host")
	t.Setenv("GOFFLOAD_SECRET", secret)
	k, _ := plugin.LookupKind("tcp")
	devs, err := k.Open(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range devs {
			d.Close()
		}
	})
	if len(devs) != 2 {
		t.Fatalf("%d devices, want 2", len(devs))
	}
	for i, d := range devs {
		if err := d.Load(entries.Current(), i); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := devs[0].Info().Serves, devs[1].Info().Serves; a != "opencl" || b != "host" {
		t.Fatalf("the devices serve %q and %q, want opencl and host", a, b)
	}
	const n = 1 << 20
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 7)
	}
	for _, dir := range [][2]int{{0, 1}, {1, 0}} {
		from, to := devs[dir[0]], devs[dir[1]]
		pf, err := from.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		pt, err := to.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		qf, _ := from.NewQueue()
		qt, _ := to.NewQueue()
		ev, _ := from.NewEvent()
		if err := qf.Submit(pf, src); err != nil {
			t.Fatal(err)
		}
		if err := qf.(plugin.Exchanger).Exchange(to, pt, pf, n); err != nil {
			t.Fatalf("exchange %d to %d: %v", dir[0], dir[1], err)
		}
		if err := qf.Record(ev); err != nil {
			t.Fatal(err)
		}
		if !to.(plugin.ForeignEventWaiter).CanWait(ev) {
			t.Fatalf("device %d cannot wait on its sibling's event", dir[1])
		}
		got := make([]byte, n)
		if err := qt.Wait(ev); err != nil {
			t.Fatal(err)
		}
		if err := qt.Retrieve(got, pt); err != nil {
			t.Fatal(err)
		}
		if err := qt.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, src) {
			t.Errorf("exchange %d to %d: the data differs", dir[0], dir[1])
		}
		qf.Close()
		qt.Close()
		ev.Close()
	}
}
