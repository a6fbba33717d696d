package remote_test

import (
	"errors"
	"os"
	"strings"
	"testing"

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
