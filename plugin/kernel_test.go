package plugin

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// paramsKernel is a kernel with params and nothing else.
type paramsKernel []Param

func (k paramsKernel) Index() int                                           { return 0 }
func (k paramsKernel) Name() string                                         { return "test.k" }
func (k paramsKernel) Params() []Param                                      { return k }
func (k paramsKernel) Code(string) (DeviceCode, bool)                       { return DeviceCode{}, false }
func (k paramsKernel) Launch(*KernelCtx, []Arg, Mem) error                  { return nil }
func (k paramsKernel) LaunchHere(*KernelCtx, []Arg, Mem, func(error)) error { return nil }

// TestCheckArgs: what every kind refuses before a launch, with an error
// that wraps ErrBadKernel and names the kernel and the argument.
func TestCheckArgs(t *testing.T) {
	k := paramsKernel{{Kind: Slice, Type: reflect.TypeFor[int64]()}, {Kind: Scalar, Type: reflect.TypeFor[int64]()}}
	ok := []Arg{{Ptr: 8, Len: 4}, {Scalar: int64(1)}}
	if err := CheckArgs(k, ok); err != nil {
		t.Fatalf("CheckArgs of good arguments: %v", err)
	}
	for _, c := range []struct {
		args []Arg
		want string
	}{
		{ok[:1], `kernel "test.k" takes 2 arguments, got 1`},
		{[]Arg{ok[0], ok[1], ok[1]}, `kernel "test.k" takes 2 arguments, got 3`},
		{[]Arg{{Len: -1}, ok[1]}, `kernel "test.k" argument 0: negative length -1`},
		{[]Arg{ok[0], {Scalar: int32(1)}}, `kernel "test.k" argument 1: got int32, want int64`},
		{[]Arg{ok[0], {}}, `kernel "test.k" argument 1: got <nil>, want int64`},
	} {
		err := CheckArgs(k, c.args)
		if !errors.Is(err, ErrBadKernel) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckArgs(%v) = %v, want ErrBadKernel saying %q", c.args, err, c.want)
		}
	}
}

// TestImageHas: the kernel of an image is in it; a nil kernel, an image
// not loaded and a kernel of another image (one that is not the image's
// kernel at its index) are refused with ErrBadKernel, saying which.
func TestImageHas(t *testing.T) {
	k, other := &paramsKernel{}, &paramsKernel{{Kind: Scalar}} // pointers, as the runtime's kernels are
	img := &Image{Kernels: []Kernel{k}}
	if err := img.Has(k); err != nil {
		t.Errorf("Has(its kernel) = %v", err)
	}
	var none *Image
	for _, c := range []struct {
		img  *Image
		k    Kernel
		want string
	}{
		{img, nil, "nil kernel"},
		{none, k, "no image loaded"},
		{img, other, `kernel "test.k" is not in the loaded image`},
		{&Image{}, k, "is not in the loaded image"},
	} {
		if err := c.img.Has(c.k); !errors.Is(err, ErrBadKernel) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Has(%v) on %v = %v, want ErrBadKernel saying %q", c.k, c.img, err, c.want)
		}
	}
}
