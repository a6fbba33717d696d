// Launching a kernel: with its DirectFunc or through reflection, on a
// runner or on the calling goroutine.

package entries

import (
	"fmt"

	"github.com/goffload/offload/plugin"
)

// A DirectFunc decodes a launch's arguments for a kernel and calls its
// body with them, without reflection (the typed kernels of the offload
// package set one). The arguments are checked (plugin.CheckArgs) before
// it is called; it checks the slices' memory, and returns that error
// without calling the body. Decoding and calling in one function lets a
// launch allocate nothing: no closure holds the decoded arguments.
type DirectFunc func(ctx *plugin.KernelCtx, args []plugin.Arg, mem plugin.Mem) error

// Directable reports whether k's arguments can be decoded by a DirectFunc
// indexed like the function's parameters: no struct parameter holding
// slices, and no slice of elements of size 0.
func (k *Kernel) Directable() bool {
	if k.structs {
		return false
	}
	for _, p := range k.params {
		if p.Kind == plugin.Slice && p.Type.Size() == 0 {
			return false
		}
	}
	return true
}

// Launch runs k on a device with args over the device's memory mem: with
// its DirectFunc if it has one, through reflection otherwise; see Call for
// panics and runtime.Goexit.
func (k *Kernel) Launch(ctx *plugin.KernelCtx, args []plugin.Arg, mem plugin.Mem) error {
	j, err := k.bind(ctx, args, mem)
	if err != nil {
		return err
	}
	release, err := k.slot(ctx)
	if err != nil {
		return err
	}
	defer release()
	return k.onRunner(j)
}

// slot waits for one of the device's kernel slots (plugin.Pool's
// SetKernelLimit), or fails when the kernel is asked to stop first.
func (k *Kernel) slot(ctx *plugin.KernelCtx) (release func(), err error) {
	if ctx == nil || ctx.Pool() == nil {
		return func() {}, nil
	}
	p := ctx.Pool()
	release, ok := p.KernelSlot(ctx.Done())
	if !ok {
		return nil, fmt.Errorf("%w: kernel %q did not start: asked to stop while it waited for one of the device's %d task slots (GOFFLOAD_DEVICE_TASKS)", plugin.ErrKernelFailed, k.name, p.KernelLimit())
	}
	return release, nil
}

// LaunchHere is Launch with the body called on the calling goroutine, not
// handed to a runner. A hand-off costs, and on a machine with few cores it
// often wakes a thread. LaunchHere is for a device's reader that runs
// short kernels to completion.
// A panic is returned as Launch returns it. But runtime.Goexit in the body
// cannot be stopped: the calling goroutine ends, after every deferred call
// on its stack has run. So the caller must clean up in deferred calls (its
// queue's state, its role). It learns the kernel's error from exited.
// LaunchHere calls exited from a deferred call, before the goroutine
// unwinds past it.
func (k *Kernel) LaunchHere(ctx *plugin.KernelCtx, args []plugin.Arg, mem plugin.Mem, exited func(error)) error {
	j, err := k.bind(ctx, args, mem)
	if err != nil {
		return err
	}
	release, err := k.slot(ctx)
	if err != nil {
		return err
	}
	defer release()
	var res result // set by run's deferred call, also on runtime.Goexit
	returned := false
	defer func() {
		if !returned { // runtime.Goexit: run's deferred call said why
			exited(res.err)
		}
	}()
	k.run(j, &res, nil)
	returned = true
	return res.err
}

// bind checks a launch's arguments and returns the job of the call: with
// the arguments as they are, for its DirectFunc to decode where the body
// runs (its slices' memory is checked there, before the body is called),
// or else with the values of a call through reflection (the context
// first).
func (k *Kernel) bind(ctx *plugin.KernelCtx, args []plugin.Arg, mem plugin.Mem) (job, error) {
	if k.direct == nil {
		vals, err := k.ArgValues(args, mem)
		if err != nil {
			return job{}, err
		}
		return job{k: k, in: k.callValues(ctx, vals)}, nil
	}
	if err := plugin.CheckArgs(k, args); err != nil {
		return job{}, err
	}
	return job{k: k, direct: true, ctx: ctx, args: args, mem: mem}, nil
}
