package cudadrv

import (
	"errors"
	"strings"
	"testing"
)

// TestLoadMissing: a library that is not there is a *LoadError naming the
// path and dlopen's reason.
func TestLoadMissing(t *testing.T) {
	_, err := Load("libgoffload-no-such-cuda.so.1")
	var le *LoadError
	if !errors.As(err, &le) || le.Path != "libgoffload-no-such-cuda.so.1" {
		t.Fatalf("Load of a missing library = %v, want a *LoadError naming it", err)
	}
	if !strings.Contains(err.Error(), "libgoffload-no-such-cuda.so.1") {
		t.Errorf("error %q does not name the library", err)
	}
}

// TestLoadLacksFunctions: a library that is there but is no CUDA driver
// (libc) is refused, naming the functions it lacks.
func TestLoadLacksFunctions(t *testing.T) {
	_, err := Load("libc.so.6")
	if err == nil || !strings.Contains(err.Error(), "cuInit") {
		t.Fatalf("Load(libc.so.6) = %v, want an error naming cuInit", err)
	}
}

func TestErrorText(t *testing.T) {
	err := error(NewError("cuMemAlloc_v2", ErrOutOfMemory, "out of memory"))
	if got, want := err.Error(), "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if Code(err) != ErrOutOfMemory || Code(nil) != Success || Code(errors.New("x")) != ErrUnknown {
		t.Errorf("Code: %v %v %v", Code(err), Code(nil), Code(errors.New("x")))
	}
	if Code(errors.Join(errors.New("a"), err)) != ErrOutOfMemory {
		t.Errorf("Code of a wrapped error")
	}
	if !ErrIllegalAddress.Sticky() || ErrOutOfMemory.Sticky() || ErrNotReady.Sticky() {
		t.Errorf("Sticky")
	}
	if Result(12345).Name() != "CUresult(12345)" {
		t.Errorf("unknown name %q", Result(12345).Name())
	}
}
