package plugin

import "testing"

// TestTrimStack: the goroutine header and the runtime's, reflect's and
// goffload's frames go (its plugin/ packages' too: opqueue's, issue 34); the program's stay, goffload's examples included.
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
github.com/goffload/offload/plugin/opqueue.(*runner).runExit(0x1)
	/m/plugin/opqueue/loop.go:40 +0x1
github.com/goffload/offload/plugin/opqueue.(*Loop).here(0x1)
	/m/plugin/opqueue/loop.go:80 +0x1
github.com/goffload/offload/plugin/opqueue.Loop.Put(0x1)
	/m/plugin/opqueue/loop.go:90 +0x1
github.com/goffload/offload/plugin/opqueue.(*Queue).RunHereExit(0x1)
	/m/plugin/opqueue/opqueue.go:100 +0x1
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
	got, at := trimStack(stack)
	if got != want || at != "prog.go:9" {
		t.Errorf("trimStack = %q, %q\nwant %q, %q", got, at, want, "prog.go:9")
	}
	// Nothing of the program's: the stack stays whole.
	only := "goroutine 1 [running]:\nruntime.main()\n\t/go/src/runtime/proc.go:1 +0x1\n"
	if got, at := trimStack(only); got != only || at != "" {
		t.Errorf("trimStack of runtime frames only = %q, %q", got, at)
	}
}
