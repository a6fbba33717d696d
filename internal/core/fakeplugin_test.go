package core

// A scripted fake device kind for the core's unit tests. A test makes the Nth
// operation of a kind fail, stall until released, or fail only after it has
// run; it can make a device die (every pending and later operation fails with
// an error wrapping plugin.ErrDeviceLost); and it reads back the operations
// the core gave the device. Queues are real in-order queues (plugin/opqueue)
// and device memory is real memory, so data results are real too.

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
)

// fakeOp is a kind of operation the fake counts, scripts and records.
type fakeOp int

const (
	fAlloc fakeOp = iota
	fFree
	fNewQueue
	fNewEvent
	fSubmit
	fRetrieve
	fExchange
	fLaunch
	fRecord
	fWait
	fSynchronize
	nFakeOps
)

var fakeOpNames = [nFakeOps]string{"Alloc", "Free", "NewQueue", "NewEvent", "Submit", "Retrieve",
	"Exchange", "Launch", "Record", "Wait", "Synchronize"}

func (o fakeOp) String() string { return fakeOpNames[o] }

// stall holds an operation until it is released.
type stall struct {
	reached, release chan struct{}
	once, relOnce    sync.Once
}

func newStall() *stall { return &stall{reached: make(chan struct{}), release: make(chan struct{})} }

// Reached is closed once the operation has arrived at the stall.
func (s *stall) Reached() <-chan struct{} { return s.reached }

// Release lets the operation go on; it may be called more than once.
func (s *stall) Release() { s.relOnce.Do(func() { close(s.release) }) }

func (s *stall) wait() {
	s.once.Do(func() { close(s.reached) })
	<-s.release
}

// action is what the script does to one operation.
type action struct {
	stall *stall // hold the operation until released (first)
	err   error  // then fail with err
	// atCall: for queue operations, stall and fail in the enqueueing call
	// rather than when the queue runs the operation.
	atCall bool
	// after: run the operation, then fail (a kernel that wrote part of its
	// output and then failed).
	after bool
}

type scriptKey struct {
	op fakeOp
	n  int
}

// fakeCall is one operation the core gave the device, as it was called.
type fakeCall struct {
	Op     fakeOp
	Queue  int        // the queue's number (0 for device calls)
	Ptr    plugin.Ptr // Alloc's result, Free's argument, a copy's device side, Launch's first argument
	Size   int64
	Kernel string
	Event  *fakeEvent // Record and Wait
	Err    error      // what the call returned
}

// fakeDevice is one scripted device.
type fakeDevice struct {
	idx int
	// foreignWait makes the device's queues wait on other fake devices'
	// events themselves (plugin.ForeignEventWaiter); set it before Start.
	foreignWait bool

	lostCh chan struct{} // closed when the device dies

	mu     sync.Mutex
	script map[scriptKey]action
	stalls []*stall
	counts [nFakeOps]int
	calls  []fakeCall
	mem    map[plugin.Ptr][]byte // allocations by base address
	next   plugin.Ptr
	events map[*fakeEvent]struct{} // not closed yet
	nq     int
	lost   error
	img    *plugin.Image
	num    int
	pool   *plugin.Pool
	closed bool
}

func newFakeDevice(idx int) *fakeDevice {
	return &fakeDevice{idx: idx, lostCh: make(chan struct{}), script: map[scriptKey]action{},
		mem: map[plugin.Ptr][]byte{}, next: 0x10000, events: map[*fakeEvent]struct{}{}, pool: plugin.NewPool(1)}
}

// on scripts the nth (from 1) operation of kind op.
func (d *fakeDevice) on(op fakeOp, n int, a action) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.script[scriptKey{op, n}] = a
	if a.stall != nil {
		d.stalls = append(d.stalls, a.stall)
	}
}

// fail makes the nth operation of kind op fail with err (for queue
// operations: when the queue runs it).
func (d *fakeDevice) fail(op fakeOp, n int, err error) { d.on(op, n, action{err: err}) }

// stallAt holds the nth operation of kind op until the stall is released.
func (d *fakeDevice) stallAt(op fakeOp, n int) *stall {
	s := newStall()
	d.on(op, n, action{stall: s})
	return s
}

// die makes the device lost: operations pending in its queues and every later
// operation fail with an error wrapping plugin.ErrDeviceLost, and its events
// that have not fired fire with that error.
func (d *fakeDevice) die() {
	d.mu.Lock()
	if d.lost != nil {
		d.mu.Unlock()
		return
	}
	d.lost = fmt.Errorf("fake device %d: %w: killed by the test", d.idx, plugin.ErrDeviceLost)
	close(d.lostCh)
	evs := make([]*fakeEvent, 0, len(d.events))
	for ev := range d.events {
		evs = append(evs, ev)
	}
	err := d.lost
	d.mu.Unlock()
	for _, ev := range evs {
		ev.ev.Fire(err)
	}
}

func (d *fakeDevice) lostErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost
}

// releaseAll releases every stall scripted on the device.
func (d *fakeDevice) releaseAll() {
	d.mu.Lock()
	ss := append([]*stall(nil), d.stalls...)
	d.mu.Unlock()
	for _, s := range ss {
		s.Release()
	}
}

// callsOf returns the recorded calls of kind op, in order.
func (d *fakeDevice) callsOf(op fakeOp) []fakeCall {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []fakeCall
	for _, c := range d.calls {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// allCalls returns every recorded call, in order.
func (d *fakeDevice) allCalls() []fakeCall {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]fakeCall(nil), d.calls...)
}

// liveAllocs is the number of allocations not freed.
func (d *fakeDevice) liveAllocs() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.mem)
}

// liveEvents is the number of events not closed.
func (d *fakeDevice) liveEvents() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.events)
}

// begin counts an operation of kind op and returns its scripted action, or
// the device's error if it is lost or closed.
func (d *fakeDevice) begin(op fakeOp) (action, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counts[op]++
	a := d.script[scriptKey{op, d.counts[op]}]
	switch {
	case d.lost != nil:
		return a, d.lost
	case d.closed:
		return a, fmt.Errorf("fake device %d: %w: device is closed", d.idx, plugin.ErrBadHandle)
	}
	return a, nil
}

// act stalls and fails as a says, once the operation is there.
func (d *fakeDevice) act(a action) error {
	if a.stall != nil {
		a.stall.wait()
	}
	if err := d.lostErr(); err != nil {
		return err
	}
	return a.err
}

func (d *fakeDevice) record(c fakeCall) {
	d.mu.Lock()
	d.calls = append(d.calls, c)
	d.mu.Unlock()
}

// call runs a device call (not a queue operation) under the script.
func (d *fakeDevice) call(op fakeOp, c *fakeCall, fn func() error) error {
	a, err := d.begin(op)
	if err == nil {
		err = d.act(a)
	}
	if err == nil {
		err = fn()
	}
	if err != nil {
		err = fmt.Errorf("fake device %d: %s: %w", d.idx, op, err)
	}
	c.Op, c.Err = op, err
	d.record(*c)
	return err
}

func (d *fakeDevice) Info() plugin.Info {
	return plugin.Info{Kind: "fake", Name: fmt.Sprintf("fake device %d", d.idx), Cores: 1, Arch: "fake", Host: "test"}
}

func (d *fakeDevice) Load(img *plugin.Image, num int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.img, d.num = img, num
	return nil
}

func (d *fakeDevice) Alloc(size int64) (plugin.Ptr, error) {
	var p plugin.Ptr
	c := fakeCall{Size: size}
	err := d.call(fAlloc, &c, func() error {
		if size < 0 || size > 1<<30 {
			return fmt.Errorf("%w: %d bytes", plugin.ErrOutOfMemory, size)
		}
		words := make([]uint64, (size+7)/8)
		d.mu.Lock()
		p = d.next
		d.next += plugin.Ptr((size+63)&^63) + 4096
		d.mem[p] = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), size)
		d.mu.Unlock()
		c.Ptr = p
		return nil
	})
	return p, err
}

func (d *fakeDevice) Free(p plugin.Ptr) error {
	return d.call(fFree, &fakeCall{Ptr: p}, func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, ok := d.mem[p]; !ok {
			return fmt.Errorf("%w: free of %#x", plugin.ErrBadPointer, uint64(p))
		}
		delete(d.mem, p)
		return nil
	})
}

// bytes returns the device memory [p, p+size), which must lie inside one
// allocation.
func (d *fakeDevice) bytes(p plugin.Ptr, size int64) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for base, b := range d.mem {
		if size >= 0 && p >= base && p <= base+plugin.Ptr(len(b)) && size <= int64(len(b))-int64(p-base) {
			return b[p-base : int64(p-base)+size], nil
		}
	}
	return nil, fmt.Errorf("fake device %d: %w: [%#x, +%d)", d.idx, plugin.ErrBadPointer, uint64(p), size)
}

func (d *fakeDevice) NewQueue() (plugin.Queue, error) {
	var q *fakeQueue
	err := d.call(fNewQueue, &fakeCall{}, func() error {
		d.mu.Lock()
		d.nq++
		q = &fakeQueue{d: d, id: d.nq, q: opqueue.New()}
		d.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return q, nil
}

func (d *fakeDevice) NewEvent() (plugin.Event, error) {
	var ev *fakeEvent
	err := d.call(fNewEvent, &fakeCall{}, func() error {
		ev = &fakeEvent{d: d, ev: opqueue.NewEvent()}
		d.mu.Lock()
		d.events[ev] = struct{}{}
		d.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ev, nil
}

// CanWait accepts the events of every fake device if foreignWait is set.
func (d *fakeDevice) CanWait(ev plugin.Event) bool {
	fe, ok := ev.(*fakeEvent)
	return ok && (fe.d == d || d.foreignWait)
}

func (d *fakeDevice) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.pool.Close()
	return nil
}

// fakeQueue is an in-order queue of a fake device.
type fakeQueue struct {
	d  *fakeDevice
	id int
	q  *opqueue.Queue
}

// enqueue counts, scripts and records a queue operation; run (nil for
// Record and Wait, which then follow on the queue) is what the operation does
// when the queue gets to it.
func (q *fakeQueue) enqueue(op fakeOp, c fakeCall, run func() error) error {
	d := q.d
	a, err := d.begin(op)
	if err == nil && a.atCall {
		err = d.act(a)
		a = action{}
	}
	if err == nil && run == nil && (a.stall != nil || a.err != nil) {
		err = q.q.Do(func() error { return d.act(a) })
	} else if err == nil && run != nil {
		err = q.q.Do(func() error {
			if a.after {
				if err := run(); err != nil {
					return err
				}
				return d.act(a)
			}
			if err := d.act(a); err != nil {
				return err
			}
			return run()
		})
	}
	if err != nil {
		err = fmt.Errorf("fake device %d: queue %d: %s: %w", d.idx, q.id, op, err)
	}
	c.Op, c.Queue, c.Err = op, q.id, err
	d.record(c)
	return err
}

func (q *fakeQueue) Submit(dst plugin.Ptr, src []byte) error {
	b, err := q.d.bytes(dst, int64(len(src)))
	if err != nil {
		return err
	}
	return q.enqueue(fSubmit, fakeCall{Ptr: dst, Size: int64(len(src))}, func() error { copy(b, src); return nil })
}

func (q *fakeQueue) Retrieve(dst []byte, src plugin.Ptr) error {
	b, err := q.d.bytes(src, int64(len(dst)))
	if err != nil {
		return err
	}
	return q.enqueue(fRetrieve, fakeCall{Ptr: src, Size: int64(len(dst))}, func() error { copy(dst, b); return nil })
}

// Exchange copies within the device, as the contract requires; to another
// device it is unsupported (the core stages such copies through the host).
func (q *fakeQueue) Exchange(dst plugin.Device, dstPtr, src plugin.Ptr, size int64) error {
	if other, ok := dst.(*fakeDevice); !ok || other != q.d {
		q.d.record(fakeCall{Op: fExchange, Queue: q.id, Ptr: src, Size: size})
		return fmt.Errorf("fake device %d: exchange: %w", q.d.idx, plugin.ErrUnsupported)
	}
	from, err := q.d.bytes(src, size)
	if err != nil {
		return err
	}
	to, err := q.d.bytes(dstPtr, size)
	if err != nil {
		return err
	}
	return q.enqueue(fExchange, fakeCall{Ptr: src, Size: size}, func() error { copy(to, from); return nil })
}

func (q *fakeQueue) Launch(pk plugin.Kernel, args []plugin.Arg) error {
	d := q.d
	d.mu.Lock()
	img, num := d.img, d.num
	d.mu.Unlock()
	k, _ := pk.(*entries.Kernel)
	if img == nil || k == nil || k.Index() < 0 || k.Index() >= len(img.Kernels) || img.Kernels[k.Index()] != pk {
		return fmt.Errorf("fake device %d: %w: kernel not in the loaded image", d.idx, plugin.ErrBadKernel)
	}
	vals, err := k.ArgValues(args, d.bytes)
	if err != nil {
		return err
	}
	ctx := plugin.NewKernelCtx(num, d.pool)
	c := fakeCall{Kernel: k.Name()}
	if len(args) > 0 {
		c.Ptr = args[0].Ptr
	}
	return q.enqueue(fLaunch, c, func() error { return k.Call(ctx, vals) })
}

func (q *fakeQueue) Record(e plugin.Event) error {
	ev, ok := e.(*fakeEvent)
	if !ok || ev.d != q.d {
		return fmt.Errorf("fake device %d: record: %w: event %T is not of this device", q.d.idx, plugin.ErrBadHandle, e)
	}
	if err := q.enqueue(fRecord, fakeCall{Event: ev}, nil); err != nil {
		return err
	}
	return q.q.Record(ev.ev)
}

func (q *fakeQueue) Wait(e plugin.Event) error {
	ev, ok := e.(*fakeEvent)
	if !ok || !q.d.CanWait(e) {
		q.d.record(fakeCall{Op: fWait, Queue: q.id, Err: plugin.ErrUnsupported})
		return fmt.Errorf("fake device %d: wait on %T: %w", q.d.idx, e, plugin.ErrUnsupported)
	}
	if err := q.enqueue(fWait, fakeCall{Event: ev}, nil); err != nil {
		return err
	}
	return q.q.Wait(ev.ev)
}

// Synchronize waits for the queue; a lost device answers at once.
func (q *fakeQueue) Synchronize() error {
	d := q.d
	a, err := d.begin(fSynchronize)
	if err == nil {
		err = d.act(a)
	}
	if err == nil {
		done := make(chan error, 1)
		go func() { done <- q.q.Synchronize() }()
		select {
		case err = <-done:
			if err == nil {
				err = d.lostErr()
			}
		case <-d.lostCh:
			err = d.lostErr()
		}
	}
	if err != nil {
		err = fmt.Errorf("fake device %d: queue %d: synchronize: %w", d.idx, q.id, err)
	}
	d.record(fakeCall{Op: fSynchronize, Queue: q.id, Err: err})
	return err
}

func (q *fakeQueue) Query() (bool, error) {
	if err := q.d.lostErr(); err != nil {
		return true, err
	}
	return q.q.Query()
}

func (q *fakeQueue) Close() error {
	done := make(chan error, 1)
	go func() { done <- q.q.Close() }()
	select {
	case err := <-done:
		return err
	case <-q.d.lostCh:
		return nil
	}
}

// fakeEvent is an event of a fake device.
type fakeEvent struct {
	d  *fakeDevice
	ev *opqueue.Event
}

func (e *fakeEvent) Synchronize() error   { return e.ev.Synchronize() }
func (e *fakeEvent) Query() (bool, error) { return e.ev.Query() }
func (e *fakeEvent) Close() error {
	e.d.mu.Lock()
	delete(e.d.events, e)
	e.d.mu.Unlock()
	return e.ev.Close()
}
