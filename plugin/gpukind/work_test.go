package gpukind_test

import (
	"reflect"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
)

// paramsKernel is a kernel with parameters and nothing else.
type paramsKernel []plugin.Param

func (k paramsKernel) Index() int                                               { return 0 }
func (k paramsKernel) Name() string                                             { return "k" }
func (k paramsKernel) Params() []plugin.Param                                   { return k }
func (k paramsKernel) Code(string) (plugin.DeviceCode, bool)                    { return plugin.DeviceCode{}, false }
func (k paramsKernel) Launch(*plugin.KernelCtx, []plugin.Arg, plugin.Mem) error { return nil }
func (k paramsKernel) LaunchHere(*plugin.KernelCtx, []plugin.Arg, plugin.Mem, func(error)) error {
	return nil
}

// TestWork: the global size of a launch is the program's, else
// num_teams×thread_limit, else one work-item per element of the longest
// slice the kernel may write; it is rounded up to whole work-groups.
func TestWork(t *testing.T) {
	in := plugin.Param{Kind: plugin.Slice, Type: reflect.TypeFor[int64](), Field: -1, SliceType: reflect.TypeFor[offload.In[int64]]()}
	out := plugin.Param{Kind: plugin.Slice, Type: reflect.TypeFor[int64](), Field: -1}
	n := plugin.Param{Kind: plugin.Scalar, Type: reflect.TypeFor[int](), Field: -1}
	k := paramsKernel{in, out, n}
	args := []plugin.Arg{{Len: 52_000_000}, {Len: 2_000_000}, {Scalar: 2_000_000}}
	if got := gpukind.Extent(k, args); got != 2_000_000 {
		t.Errorf("Extent = %d, want the written slice's 2000000", got)
	}
	readOnly := paramsKernel{in, n}
	if got := gpukind.Extent(readOnly, args[:1]); got != 52_000_000 {
		t.Errorf("Extent of a kernel that writes no slice = %d, want its longest slice's", got)
	}
	if got := gpukind.Extent(paramsKernel{}, nil); got != 1 {
		t.Errorf("Extent without slices = %d, want 1", got)
	}
	for _, c := range []struct {
		g     plugin.Geometry
		local [3]int
		want  [3]int
	}{
		{plugin.Geometry{}, [3]int{256, 1, 1}, [3]int{2_000_128, 1, 1}},
		{plugin.Geometry{}, [3]int{}, [3]int{2_000_000, 1, 1}},
		{plugin.Geometry{Size: [3]int{1000, 3, 1}}, [3]int{64, 2, 1}, [3]int{1024, 4, 1}},
		{plugin.Geometry{Teams: [3]int{3, 2, 1}}, [3]int{64, 1, 1}, [3]int{192, 2, 1}},
	} {
		if got := gpukind.Work(k, args, c.g, c.local); got != c.want {
			t.Errorf("Work(%s, local %v) = %v, want %v", c.g, c.local, got, c.want)
		}
	}
}
