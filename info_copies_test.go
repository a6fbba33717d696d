package offload_test

import (
	"strings"
	"testing"

	"github.com/goffload/offload"
)

var scaleNamed = offload.MustKernel2("test.info.scale", func(_ offload.Ctx, alpha int32, x offload.InOut[int32]) {
	for i := range x {
		x[i] *= alpha
	}
}).Named("alpha", "x")

// TestInfoShowsEveryCopy: GOFFLOAD_INFO=copies lists device-to-device
// copies (Copy, CopyNowait) with both devices, and kernel-args names a
// scalar parameter by its Named name (issue 20: both were missing).
func TestInfoShowsEveryCopy(t *testing.T) {
	var info syncBuffer
	start(t, offload.WithDevices("host:2"), offload.WithInfo("copies,kernel-args", &info))
	d0, d1 := offload.On(0), offload.On(1)
	x := make([]int32, 64)
	if err := d0.EnterData(offload.To(x)); err != nil {
		t.Fatal(err)
	}
	if err := d1.EnterData(offload.Alloc(x)); err != nil {
		t.Fatal(err)
	}
	if err := offload.Copy(d1, x, d0, x); err != nil {
		t.Fatal(err)
	}
	if err := offload.CopyNowait(offload.Nowait(), d0, x[:8], d1, x[:8]).Wait(); err != nil {
		t.Fatal(err)
	}
	if err := scaleNamed.Run(d1, 3, x); err != nil {
		t.Fatal(err)
	}
	d1.ExitData(offload.Release(x))
	d0.ExitData(offload.Release(x))
	out := info.String()
	for _, want := range []string{
		"Copying data from device 0 to device 1",
		"Copying data from device 1 to device 0",
		"Size=256",
		"Size=32",
		"firstprivate(alpha)[4]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the info output lacks %q:\n%s", want, out)
		}
	}
}

var axpyInfo = offload.MustKernel3("test.info.axpy", func(_ offload.Ctx, a int32, x offload.In[int32], y offload.InOut[int32]) {
	for i := range y {
		y[i] += a * x[i]
	}
}).Named("a", "x", "y")

// TestInfoSuggestsDataRegionAxpy (issue 34): the hint fires for every
// range copied to the same device again and again, also when the copies
// of two ranges alternate (axpy: In x, InOut y), once per range.
func TestInfoSuggestsDataRegionAxpy(t *testing.T) {
	var info syncBuffer
	start(t, offload.WithDevices("host"), offload.WithInfo("copies", &info))
	x, y := make([]int32, 16), make([]int32, 16)
	for range 10 {
		if err := axpyInfo.Run(offload.On(0), 2, x, y); err != nil {
			t.Fatal(err)
		}
	}
	out := info.String()
	if n := strings.Count(out, "hint: "); n != 2 || !strings.Contains(out, "hint: x (") || !strings.Contains(out, "hint: y (") {
		t.Errorf("%d hints; want one for x and one for y:\n%s", n, out)
	}
}

// TestInfoSuggestsDataRegion: the same host range copied to the same
// device many times gets one info line suggesting a data region.
func TestInfoSuggestsDataRegion(t *testing.T) {
	var info syncBuffer
	start(t, offload.WithDevices("host"), offload.WithInfo("copies", &info))
	x := make([]int32, 16)
	for range 20 {
		if err := scaleNamed.Run(offload.On(0), 1, x); err != nil {
			t.Fatal(err)
		}
	}
	out := info.String()
	if n := strings.Count(out, "hint: "); n != 1 || !strings.Contains(out, "was copied to device 0 (host) 8 times: map it once, with a data region") {
		t.Errorf("%d hints; want one suggesting a data region:\n%s", n, out)
	}
	info.Reset()
	if err := offload.On(0).Data(func() error {
		for range 20 {
			if err := scaleNamed.Run(offload.On(0), 1, x); err != nil {
				return err
			}
		}
		return nil
	}, offload.ToFrom(x)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(info.String(), "hint: ") {
		t.Errorf("a hint inside a data region:\n%s", info.String())
	}
}
