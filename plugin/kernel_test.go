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
