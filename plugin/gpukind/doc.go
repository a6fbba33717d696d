// Package gpukind is the base a GPU device kind is built on. It holds what
// the cuda and opencl kinds would otherwise each write, so that a kind keeps
// only its driver's calls. A third kind (HIP, Level Zero), in this module or
// another, can be written on it.
//
// It gives a kind:
//
//   - Device, embedded in the kind's device: its state (devstate.State),
//     its events, and its loaded image (Kernels). It gives plugin.Device's
//     Alloc, Free, NewEvent and Info, and Load's common part. It gives the
//     optional plugin.KernelChecker, plugin.ForeignEventWaiter and
//     plugin.LostReporter too.
//   - Events and Event: the device's events, over the driver's handles
//     (EventDriver). They do arming, reference counts, firing and
//     host-side waits. They give plugin.FireNotifier through one poller per
//     device. They release each handle once nothing refers to it.
//   - Queue, embedded in the kind's queue: the in-order loop of the kind's
//     operations (opqueue.Loop) with its error state. It gives Record and
//     Wait over the kind's Issuer, plugin.InlineQueue and
//     plugin.TaggedQueue. It makes the checks a launch makes before it is
//     enqueued (Launchable).
//   - Emulate: a kernel's Go body run on the host over copies of device
//     memory, for tests that run Go-only kernels on a driver.
//   - Drivers, LibraryPath and LoadFailure: a driver library loaded once
//     per process and path, and why it did not load.
//   - GoParam, GoType, Plural and Dialect: the names that checks of device
//     code against a kernel's Go parameters give in their errors.
//
// Who promises what: the kind implements EventDriver, Memory and Issuer with
// its driver. It promises that their errors are already in the plugin
// contract's terms. Its issuer fires each recorded event once (Event.Fire).
// It drops the references it was given (Event.Unref).
//
// This package then keeps the contract's rules for events and queues. An
// event fires once. A wait on an event never recorded is
// plugin.ErrNotRecorded. A handle is released only when closed, unreferenced
// and complete. Errors name the device. Types and functions are safe for
// concurrent use unless they say otherwise.
package gpukind
