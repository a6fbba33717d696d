package offload

import (
	"testing"
	"unsafe"
)

// tbParams stands for a struct of nine int64s passed by value, as Task
// Bench's kernel takes its parameters.
type tbParams struct{ A, B, C, D, E, F, G, H, I int64 }

// TestRecordSizes pins the bytes of a task's records, one allocation each
// (TestNowaitAllocs*): the most bytes of the size class each falls in. A
// stencil's tasks allocate them at every timestep, and most of what an
// allocation costs is its bytes (docs/tasks.md). A field added to Task,
// work or a record that pushes one into the next class fails here.
func TestRecordSizes(t *testing.T) {
	for _, c := range []struct {
		what       string
		size, most uintptr
	}{
		{"a copy's (CopyNowait)", unsafe.Sizeof(copyTask{}), 768},
		{"a 1-buffer launch's", unsafe.Sizeof(kernel1Task[[]int32]{}), 1024},
		{"a 2-buffer launch's", unsafe.Sizeof(kernel2Task[[]int32, []int32]{}), 1152},
		{"a 3-buffer launch's", unsafe.Sizeof(kernel3Task[[]int32, []int32, []int32]{}), 1408},
		{"a 4-buffer launch's", unsafe.Sizeof(kernel4Task[[]int32, []int32, []int32, []int32]{}), 1536},
		{"Task Bench's 5-argument launch's", unsafe.Sizeof(kernel5Task[tbParams, []int64, []int64, []int64, []int64]{}), 1792},
		{"an untyped launch's (Async.Run)", unsafe.Sizeof(runTask{}), 1280},
	} {
		if c.size > c.most {
			t.Errorf("%s records take %d bytes, want at most %d (its size class)", c.what, c.size, c.most)
		}
	}
}
