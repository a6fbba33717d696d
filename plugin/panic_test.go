package plugin

import (
	"errors"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestTrimStack: the goroutine header and the runtime's, reflect's and
// goffload's frames go; the program's stay, goffload's examples included.
func TestTrimStack(t *testing.T) {
	stack := `goroutine 7 [running]:
runtime/debug.Stack()
	/go/src/runtime/debug/stack.go:26 +0x5e
github.com/goffload/offload/plugin.(*Kernel).run.func1()
	/m/plugin/kernel.go:313 +0x1
panic({0x1, 0x2})
	/go/src/runtime/panic.go:791 +0x132
runtime.goPanicIndex(0x5, 0x4)
	/go/src/runtime/panic.go:115 +0x74
example.com/prog.helper(...)
	/p/prog.go:9
example.com/prog.init.func1({0x1, 0x2}, {0x3, 0x4, 0x5})
	/p/prog.go:20 +0x50
github.com/goffload/offload.(*kctx).For(0x1, 0x2)
	/m/ctx.go:12 +0x1
github.com/goffload/offload/examples/saxpy.main.func1()
	/m/examples/saxpy/main.go:30 +0x2
reflect.Value.call({0x1, 0x2, 0x13}, {0x5, 0x4}, {0x3, 0x3, 0x3})
	/go/src/reflect/value.go:581 +0xca6
reflect.Value.Call({0x1, 0x2, 0x13}, {0x3, 0x3, 0x3})
	/go/src/reflect/value.go:365 +0xb9
github.com/goffload/offload/plugin.(*runner).loop(0x1)
	/m/plugin/kernel.go:274 +0x1
created by github.com/goffload/offload/plugin.getRunner in goroutine 6
	/m/plugin/kernel.go:262 +0x1
`
	want := `example.com/prog.helper(...)
	/p/prog.go:9
example.com/prog.init.func1({0x1, 0x2}, {0x3, 0x4, 0x5})
	/p/prog.go:20 +0x50
github.com/goffload/offload/examples/saxpy.main.func1()
	/m/examples/saxpy/main.go:30 +0x2
`
	got, at := TrimStack(stack)
	if got != want || at != "prog.go:9" {
		t.Errorf("TrimStack = %q, %q\nwant %q, %q", got, at, want, "prog.go:9")
	}
	// Nothing of the program's: the stack stays whole.
	only := "goroutine 1 [running]:\nruntime.main()\n\t/go/src/runtime/proc.go:1 +0x1\n"
	if got, at := TrimStack(only); got != only || at != "" {
		t.Errorf("TrimStack of runtime frames only = %q, %q", got, at)
	}
}

// TestLaunchHere: the body runs on the calling goroutine; a panic comes
// back as an error; runtime.Goexit ends the goroutine, after exited is told
// the kernel's error.
func TestLaunchHere(t *testing.T) {
	var on []byte
	k := &Kernel{Name: "test.here", Fn: reflect.ValueOf(func() { on = debugStack() })}
	if err := k.LaunchHere(nil, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(on), "TestLaunchHere") {
		t.Errorf("the body did not run on the caller's goroutine:\n%s", on)
	}
	boom := &Kernel{Name: "test.boom", Fn: reflect.ValueOf(func() { panic("boom") })}
	if err := boom.LaunchHere(nil, nil, nil, nil); !errors.Is(err, ErrKernelFailed) || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panic: %v", err)
	}
	exit := &Kernel{Name: "test.exit", Fn: reflect.ValueOf(runtime.Goexit)}
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
	if err := <-got; !errors.Is(err, ErrKernelFailed) || !strings.Contains(err.Error(), "runtime.Goexit") {
		t.Errorf("Goexit: %v", err)
	}
}

func debugStack() []byte { return debug.Stack() }
