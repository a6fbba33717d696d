package offload_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

// TestOnePrefix (issue 34): an error that wraps another of the runtime's
// says "goffload: " once, at its start, not again where the wrapped
// error's text begins (a dependent task's error quotes its failed
// predecessor's; a staged copy's quotes the copy in's).
func TestOnePrefix(t *testing.T) {
	start(t, offload.WithDevices("host:2"))
	x := filled(64, 3)
	failed := offload.On(0).Nowait(offload.DependInOut(x)).Run(Boom, int32(0), x)
	dep := offload.On(1).Nowait(offload.DependIn(x)).Run(benchTouch, make([]byte, 8))
	err := dep.Wait()
	if !errors.Is(err, offload.ErrDependency) {
		t.Fatalf("the dependent task: %v, want ErrDependency", err)
	}
	if n := strings.Count(err.Error(), "goffload: "); n != 1 || !strings.HasPrefix(err.Error(), "goffload: ") {
		t.Errorf("%q: %d goffload: prefixes, want one, at the start", err, n)
	}
	if !errors.Is(err, offload.ErrKernelFailed) {
		t.Errorf("%v: the cause is no longer wrapped", err)
	}
	if err := failed.Wait(); err == nil {
		t.Error("the failing task succeeded")
	}
}
