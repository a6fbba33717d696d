package offload_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

var (
	checkWritesIn = offload.MustKernel2("test.check.writesin", func(_ offload.Ctx, x offload.In[int32], y offload.Out[int32]) {
		x[2] = 7 // a mistake: x is In
		for i := range y {
			y[i] = x[i]
		}
	}).Named("x", "y")
	checkPartialOut = offload.MustKernel1("test.check.partial", func(_ offload.Ctx, y offload.Out[int64]) {
		for i := range len(y) - 3 { // a mistake: the last three are left
			y[i] = int64(i)
		}
	}).Named("y")
	checkGood = offload.MustKernel2("test.check.good", func(_ offload.Ctx, x offload.In[int32], y offload.Out[int32]) {
		for i := range y {
			y[i] = 2 * x[i]
		}
	}).Named("x", "y")
)

// TestCheckMaps: under GOFFLOAD_CHECK=maps a kernel that writes into an In
// buffer, and one that leaves Out elements unwritten, are reported with
// the kernel, the parameter and the first index, on every CPU kind; a
// correct kernel is not; and the results are what they are without the
// check.
func TestCheckMaps(t *testing.T) {
	t.Setenv("GOFFLOAD_CHECK", "maps")
	var info syncBuffer
	start(t, offload.WithDevices("host:1,local:1"), offload.WithInfo("", &info))
	for _, dev := range []offload.Device{offload.On(0), offload.On(1), offload.Initial()} {
		info.Reset()
		x, y := []int32{1, 2, 3, 4, 5, 6, 7, 8}, make([]int32, 8)
		if err := checkWritesIn.Run(dev, x, y); err != nil {
			t.Fatal(err)
		}
		if y[2] != 7 {
			t.Errorf("%s: y = %v", dev, y)
		}
		z := make([]int64, 10)
		for i := range z {
			z[i] = -1
		}
		if err := checkPartialOut.Run(dev, z); err != nil {
			t.Fatal(err)
		}
		if err := checkGood.Run(dev, x, y); err != nil {
			t.Fatal(err)
		}
		out := info.String()
		for _, want := range []string{
			"check: kernel test.check.writesin, parameter 0 (x), In: 1 of 8 elements changed, the first at index 2",
			"check: kernel test.check.partial, parameter 0 (y), Out: 3 of 10 elements not written, the first at index 7",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: the check output lacks %q:\n%s", dev, want, out)
			}
		}
		if strings.Contains(out, "test.check.good") {
			t.Errorf("%s: a correct kernel was reported:\n%s", dev, out)
		}
		if dev == offload.Initial() && fmt.Sprint(z[7:]) != "[-1 -1 -1]" {
			t.Errorf("initial device: the unwritten Out elements are %v, want the host's -1 back", z[7:])
		}
	}
}
