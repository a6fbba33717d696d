package gentest

import (
	"errors"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

// TestGlobals: declare target variables in generated kernels on PoCL, as
// on a host device: a "to" variable's device copy (X.On(ctx)), which
// Update changes; a "link" variable seen only while mapped, its kernel
// failing with ErrKernelFailed naming it otherwise.
func TestGlobals(t *testing.T) {
	c := Coeffs.Host()
	defer func(old []float64) { copy(c, old) }(append([]float64(nil), c...))
	host, cl := start(t)
	x := []float64{1, 1, 1, 1, 2, 2}
	for _, d := range []offload.Device{host, cl} {
		out := make([]float64, len(x))
		if err := UseCoeffs.Run(d, x, out); err != nil {
			t.Fatalf("device %d: %v", d.Num(), err)
		}
		if want := []float64{1, 2, 3, 4, 2, 4}; !equalF(out, want) {
			t.Fatalf("device %d: %v, want %v", d.Num(), out, want)
		}
	}
	c[0] = 10
	if err := cl.Update(offload.To(c)); err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(x))
	if err := UseCoeffs.Run(cl, x, out); err != nil || out[0] != 10 || out[4] != 20 {
		t.Fatalf("after Update: %v, %v", out, err)
	}

	tab := Table.Host()
	clear(tab)
	for _, d := range []offload.Device{host, cl} {
		err := BumpTable.Run(d, 8)
		if !errors.Is(err, offload.ErrKernelFailed) || !strings.Contains(err.Error(), `"gentest.table"`) {
			t.Fatalf("device %d, the link variable not mapped: %v, want ErrKernelFailed naming it", d.Num(), err)
		}
	}
	if err := cl.EnterData(offload.To(tab)); err != nil {
		t.Fatal(err)
	}
	if err := BumpTable.Run(cl, 8); err != nil {
		t.Fatal(err)
	}
	if err := BumpTable.Run(cl, 4); err != nil {
		t.Fatal(err)
	}
	if err := cl.ExitData(offload.From(tab)); err != nil {
		t.Fatal(err)
	}
	for i, v := range tab {
		want := int64(i)
		if i < 4 {
			want *= 2
		}
		if v != want {
			t.Fatalf("table[%d] = %d, want %d (%v)", i, v, want, tab)
		}
	}
}

func equalF(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
