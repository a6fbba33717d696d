package entries

import (
	"errors"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/goffload/offload/plugin"
)

// TestLaunchHere: the body runs on the calling goroutine; a panic comes
// back as an error; runtime.Goexit ends the goroutine, after exited is told
// the kernel's error.
func TestLaunchHere(t *testing.T) {
	var on []byte
	k := &Kernel{name: "test.here", fn: reflect.ValueOf(func() { on = debugStack() })}
	if err := k.LaunchHere(nil, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(on), "TestLaunchHere") {
		t.Errorf("the body did not run on the caller's goroutine:\n%s", on)
	}
	boom := &Kernel{name: "test.boom", fn: reflect.ValueOf(func() { panic("boom") })}
	if err := boom.LaunchHere(nil, nil, nil, nil); !errors.Is(err, plugin.ErrKernelFailed) || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panic: %v", err)
	}
	exit := &Kernel{name: "test.exit", fn: reflect.ValueOf(runtime.Goexit)}
	got := make(chan error, 1)
	returned := make(chan bool, 1)
	go func() {
		defer close(returned)
		exit.LaunchHere(nil, nil, nil, func(err error) { got <- err })
		returned <- true
	}()
	if <-returned {
		t.Fatal("LaunchHere returned after runtime.Goexit")
	}
	if err := <-got; !errors.Is(err, plugin.ErrKernelFailed) || !strings.Contains(err.Error(), "runtime.Goexit") {
		t.Errorf("Goexit: %v", err)
	}
}

func debugStack() []byte { return debug.Stack() }
