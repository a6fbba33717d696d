package gpukind

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload/plugin"
)

// fakeOp is a fake kind's operation.
type fakeOp struct {
	kind Op
	ev   *Event[handle]
	err  error // what issuing it returns (a failing copy)
	tag  uint64
}

// fakeQueue is a fake kind's queue on Queue: it issues records by firing
// them and waits by reading the waited-for event, as a kind's issuer does.
type fakeQueue struct {
	Queue[fakeOp, handle, int]
	issued []string
}

type fakeIssuer fakeQueue

func (i *fakeIssuer) RecordOp(ev *Event[handle], tag uint64) fakeOp {
	return fakeOp{kind: OpRecord, ev: ev, tag: tag}
}

func (i *fakeIssuer) WaitOp(ev *Event[handle], tag uint64) fakeOp {
	return fakeOp{kind: OpWait, ev: ev, tag: tag}
}

func (i *fakeIssuer) Run(o fakeOp, failed error) error {
	switch o.kind {
	case OpRecord:
		o.ev.Fire(failed, nil, 0)
		o.ev.Unref()
		i.issued = append(i.issued, "record")
		return nil
	case OpWait:
		<-o.ev.Issued()
		defer o.ev.Unref()
		if failed == nil && o.ev.Err() != nil {
			return fmt.Errorf("waited-for event failed: %w", o.ev.Err())
		}
		i.issued = append(i.issued, "wait")
		return nil
	}
	if failed != nil {
		return nil // skipped
	}
	i.issued = append(i.issued, o.kind.String())
	return o.err
}

func (q *fakeQueue) LaunchGeometry(k plugin.Kernel, args []plugin.Arg, g plugin.Geometry) error {
	kf, run, err := q.Launchable(k, args)
	if !run || err != nil {
		return err
	}
	return q.Put(fakeOp{kind: OpLaunch, tag: uint64(kf.Fn)})
}

// fakeMemory is one allocation of 64 bytes at 0x1000.
type fakeMemory struct{ b [64]byte }

func (m *fakeMemory) Alloc(int64) (plugin.Ptr, error) { return 0x1000, nil }
func (m *fakeMemory) Free(plugin.Ptr) error           { return nil }
func (m *fakeMemory) Check(p plugin.Ptr, size int64) error {
	if p < 0x1000 || size < 0 || int64(p-0x1000)+size > int64(len(m.b)) {
		return fmt.Errorf("%w: [%#x, +%d bytes) is not inside a live allocation", plugin.ErrBadPointer, uint64(p), size)
	}
	return nil
}

// newDevice returns a fake kind's device with kernels, loaded.
func newDevice(t *testing.T, ks ...plugin.Kernel) (*Device[handle, int], *fakeMemory) {
	t.Helper()
	d := &Device[handle, int]{}
	mem := &fakeMemory{}
	d.Init(mem, newFakeDriver(), "fake")
	err := d.Load(&plugin.Image{Kernels: ks}, 0, "fake device 0", Format{Key: "fake", Name: "fake code", Device: "a fake device", Method: "its Code"},
		func(k plugin.Kernel, code plugin.DeviceCode) Kernel[int] { return Kernel[int]{Fn: len(code.Entry)} })
	if err != nil {
		t.Fatal(err)
	}
	return d, mem
}

func newQueue(d *Device[handle, int]) *fakeQueue {
	q := &fakeQueue{}
	q.Init(d, (*fakeIssuer)(q), q, nil)
	return q
}

// TestQueueRecordWait: records and waits go through the issuer in order;
// an operation that fails puts the queue in the error state, which the
// events recorded after it carry, until Synchronize takes it.
func TestQueueRecordWait(t *testing.T) {
	d, _ := newDevice(t)
	q := newQueue(d)
	e1, _ := d.NewEvent()
	e2, _ := d.NewEvent()
	if err := q.Wait(e1); !errors.Is(err, plugin.ErrNotRecorded) {
		t.Fatalf("Wait on an unrecorded event = %v, want ErrNotRecorded", err)
	}
	if err := q.Record(e1); err != nil {
		t.Fatal(err)
	}
	if err := q.Record(e1); !errors.Is(err, plugin.ErrBadHandle) || !strings.Contains(err.Error(), "fake device 0: record: ") {
		t.Fatalf("a second Record = %v, want ErrBadHandle naming the device", err)
	}
	if err := q.Wait(e1); err != nil {
		t.Fatal(err)
	}
	fail := errors.New("fake device 0: submit of 8 bytes: out of memory")
	if err := q.Put(fakeOp{kind: OpSubmit, err: fail}); err != nil {
		t.Fatal(err)
	}
	if err := q.Record(e2); err != nil {
		t.Fatal(err)
	}
	if err := e2.Synchronize(); err != fail {
		t.Fatalf("an event recorded after a failure = %v, want the failure", err)
	}
	if err := q.L.Synchronize(); err != fail {
		t.Fatalf("Synchronize = %v, want the failure", err)
	}
	if got := strings.Join(q.issued, " "); got != "record wait submit record" {
		t.Fatalf("issued %q", got)
	}
}

// TestQueueForeignEvents: a queue records only its device's events, and
// waits only on events of its domain.
func TestQueueForeignEvents(t *testing.T) {
	d, _ := newDevice(t)
	q := newQueue(d)
	var other Events[handle]
	other.Init(newFakeDriver(), &d.St, "elsewhere")
	e, _ := other.NewEvent()
	if err := q.Record(e); !errors.Is(err, plugin.ErrBadHandle) {
		t.Errorf("Record of another device's event = %v, want ErrBadHandle", err)
	}
	if err := q.Wait(e); !errors.Is(err, plugin.ErrUnsupported) {
		t.Errorf("Wait on another domain's event = %v, want ErrUnsupported", err)
	}
	if !q.L.Close() {
		t.Fatal("Close failed")
	}
	mine, _ := d.NewEvent()
	if err := q.Record(mine); !errors.Is(err, plugin.ErrBadHandle) || !strings.Contains(err.Error(), "queue is closed") {
		t.Errorf("Record on a closed queue = %v", err)
	}
}

// fakeKernel is a kernel with parameters, code of the fake format if
// entry is not "", and a Go body.
type fakeKernel struct {
	name   string
	params []plugin.Param
	entry  string
	body   func(args []plugin.Arg, mem plugin.Mem) error
}

func (k *fakeKernel) Index() int             { return 0 }
func (k *fakeKernel) Name() string           { return k.name }
func (k *fakeKernel) Params() []plugin.Param { return k.params }
func (k *fakeKernel) Launch(_ *plugin.KernelCtx, args []plugin.Arg, mem plugin.Mem) error {
	return k.body(args, mem)
}
func (k *fakeKernel) LaunchHere(_ *plugin.KernelCtx, args []plugin.Arg, mem plugin.Mem, _ func(error)) error {
	return k.body(args, mem)
}
func (k *fakeKernel) Code(f string) (plugin.DeviceCode, bool) {
	if f != "fake" || k.entry == "" {
		return plugin.DeviceCode{}, false
	}
	return plugin.DeviceCode{Entry: k.entry}, true
}

var sliceOfInt32 = plugin.Param{Kind: plugin.Slice, Type: reflect.TypeFor[int32](), Field: -1}

// TestLaunchable: a launch is checked against the kernel and the device's
// memory before it is enqueued, with errors naming the device, the kernel
// and the argument; a kernel without code fails its launches.
func TestLaunchable(t *testing.T) {
	withCode := &fakeKernel{name: "k.code", params: []plugin.Param{sliceOfInt32}, entry: "entry"}
	d, _ := newDevice(t, withCode)
	q := newQueue(d)
	if err := q.Launch(withCode, []plugin.Arg{{Ptr: 0x1000, Len: 16}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []plugin.Arg
		want string
	}{
		{[]plugin.Arg{{Ptr: 0x1000, Len: 17}}, `fake device 0: kernel "k.code" argument 0 ([]int32, 17 elements at 0x1000): invalid device pointer`},
		{[]plugin.Arg{{Ptr: 0x1000, Len: -1}}, `fake device 0: `},
		{nil, `kernel "k.code" takes 1 argument`},
	} {
		if err := q.Launch(withCode, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Launch(%v) = %v, want an error saying %q", c.args, err, c.want)
		}
	}
	if err := q.L.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(q.issued, " "); got != "launch" {
		t.Fatalf("issued %q, want one launch", got)
	}

	noCode := &fakeKernel{name: "k.go", params: []plugin.Param{sliceOfInt32}}
	d2, _ := newDevice(t, noCode)
	err := newQueue(d2).Launch(noCode, []plugin.Arg{{Ptr: 0x1000, Len: 1}})
	if !errors.Is(err, plugin.ErrBadKernel) || !errors.Is(err, plugin.ErrUnsupported) ||
		!strings.Contains(err.Error(), `fake device 0: invalid kernel launch: kernel "k.go" has no fake code: a fake device cannot run its Go body (give it device code with its Code`) {
		t.Errorf("Launch of a kernel without code = %v", err)
	}
	if err := d2.CanLaunch(noCode); err == nil {
		t.Error("CanLaunch of a kernel without code = nil")
	}
}

// TestEmulate: a Go body runs over copies of the device memory its slices
// lie in; the arguments' own bytes are copied back, and the rest of their
// allocation is not (another task's meanwhile).
func TestEmulate(t *testing.T) {
	bytes := plugin.Param{Kind: plugin.Slice, Type: reflect.TypeFor[byte](), Field: -1}
	k := &fakeKernel{name: "k.add", params: []plugin.Param{bytes, bytes}, body: func(args []plugin.Arg, mem plugin.Mem) error {
		src, err := mem(args[0].Ptr, int64(args[0].Len))
		if err != nil {
			return err
		}
		dst, err := mem(args[1].Ptr, int64(args[1].Len))
		if err != nil {
			return err
		}
		for i := range dst {
			dst[i] += src[i]
		}
		rest, err := mem(0x200c, 4) // in the allocation, in no argument
		if err != nil {
			return err
		}
		rest[0] = 99
		return nil
	}}
	m := &emuMem{b: make([]byte, 16)}
	copy(m.b, []byte{1, 2, 3, 4, 10, 20, 30, 40, 0, 0, 0, 0, 7})
	var timed bool
	err := Emulate(k, []plugin.Arg{{Ptr: 0x2000, Len: 4}, {Ptr: 0x2004, Len: 4}}, nil, m, func(_, _ time.Time, err error) { timed = err == nil })
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{1, 2, 3, 4, 11, 22, 33, 44, 0, 0, 0, 0, 7}; string(m.b[:13]) != string(want) || !timed {
		t.Fatalf("memory %v (timed %v), want %v", m.b[:13], timed, want)
	}
	err = Emulate(k, []plugin.Arg{{Ptr: 0x2000, Len: 4}, {Ptr: 0x200e, Len: 4}}, nil, m, nil)
	if !errors.Is(err, plugin.ErrBadPointer) || !strings.Contains(err.Error(), `kernel "k.add": invalid device pointer: argument 1, [0x200e, +4 bytes), runs past its allocation`) {
		t.Fatalf("Emulate past the allocation = %v", err)
	}
}

// emuMem is one allocation of len(b) bytes at 0x2000.
type emuMem struct{ b []byte }

func (m *emuMem) Allocation(p plugin.Ptr) (plugin.Ptr, int64, bool) {
	return 0x2000, int64(len(m.b)), p >= 0x2000 && p < 0x2000+plugin.Ptr(len(m.b))
}
func (m *emuMem) Read(dst []byte, src plugin.Ptr) error  { copy(dst, m.b[src-0x2000:]); return nil }
func (m *emuMem) Write(dst plugin.Ptr, src []byte) error { copy(m.b[dst-0x2000:], src); return nil }
