package handptx

import (
	"testing"

	"github.com/goffload/offload/internal/ptx"
	"github.com/goffload/offload/internal/ptxgen"
)

// TestPTXGenerated: each .ptx is what go generate makes of its .cu file,
// where clang with the NVPTX target is installed.
func TestPTXGenerated(t *testing.T) {
	ptxgen.UpToDate(t, "handptx.go")
}

// TestEntries: each image has the entries the examples' kernels had.
func TestEntries(t *testing.T) {
	for _, c := range []struct {
		name    string
		image   []byte
		entries []string
	}{
		{"saxpy", Saxpy, []string{"saxpy"}},
		{"step", Step, []string{"step"}},
		{"jacobi", Jacobi, []string{"step", "steprows"}},
		{"cholesky", Cholesky, []string{"potrf", "trsm", "syrk", "gemm"}},
	} {
		es, err := ptx.Entries(c.image)
		if err != nil {
			t.Fatalf("%s.ptx: %v", c.name, err)
		}
		for _, e := range c.entries {
			if _, ok := es[e]; !ok {
				t.Errorf("%s.ptx has no entry %s", c.name, e)
			}
		}
	}
}
