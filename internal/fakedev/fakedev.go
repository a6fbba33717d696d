// Package fakedev is a scripted fake device kind, "fake", for tests of the
// runtime without device processes (internal/core's and internal/anyrun's).
// A test makes the Nth operation of a kind fail, stall until released, or
// fail only after it has run. It can make a device die: every pending and
// later operation fails with an error wrapping plugin.ErrDeviceLost. It
// reads back the operations the runtime gave the device. Queues are real
// in-order queues (plugin/opqueue) and device memory is real memory, so
// data results are real too.
package fakedev

import (
	"fmt"
	"strconv"
	"sync"
	"unsafe"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
)

// Op is a kind of operation the fake counts, scripts and records.
type Op int

// The operations, one of each plugin call the fake counts.
const (
	OpAlloc Op = iota
	OpFree
	OpNewQueue
	OpNewEvent
	OpSubmit
	OpRetrieve
	OpExchange
	OpLaunch
	OpRecord
	OpWait
	OpSynchronize
	nOps
)

var opNames = [nOps]string{"Alloc", "Free", "NewQueue", "NewEvent", "Submit", "Retrieve",
	"Exchange", "Launch", "Record", "Wait", "Synchronize"}

// String is the operation's plugin method name.
func (o Op) String() string { return opNames[o] }

// Stall holds an operation until it is released.
type Stall struct {
	reached, release chan struct{}
	once, relOnce    sync.Once
}

// NewStall makes a stall that holds its operation until released.
func NewStall() *Stall { return &Stall{reached: make(chan struct{}), release: make(chan struct{})} }

// Reached is closed once the operation has arrived at the Stall.
func (s *Stall) Reached() <-chan struct{} { return s.reached }

// Release lets the operation go on; it may be called more than once.
func (s *Stall) Release() { s.relOnce.Do(func() { close(s.release) }) }

func (s *Stall) wait() {
	s.once.Do(func() { close(s.reached) })
	<-s.release
}

// Action is what the script does to one operation.
type Action struct {
	Stall *Stall // hold the operation until released (first)
	Err   error  // then fail with err
	// AtCall: for queue operations, Stall and fail in the enqueueing call
	// rather than when the queue runs the operation.
	AtCall bool
	// After: run the operation, then fail (a kernel that wrote part of its
	// output and then failed).
	After bool
}

type scriptKey struct {
	op Op
	n  int
}

// Call is one operation the core gave the device, as it was called.
type Call struct {
	Op     Op
	Queue  int        // the queue's number (0 for device calls)
	Ptr    plugin.Ptr // Alloc's result, Free's argument, a copy's device side, Launch's first argument
	Size   int64
	Kernel string
	Event  *Event // Record and Wait
	Err    error  // what the call returned
}

// Device is one scripted device.
type Device struct {
	Idx int
	// ForeignWait makes the device's queues wait on other fake devices'
	// events themselves (plugin.ForeignEventWaiter); set it before Start.
	ForeignWait bool

	lostCh chan struct{} // closed when the device dies

	mu     sync.Mutex
	script map[scriptKey]Action
	stalls []*Stall
	counts [nOps]int
	calls  []Call
	mem    map[plugin.Ptr][]byte // allocations by base address
	next   plugin.Ptr
	events map[*Event]struct{} // not closed yet
	nq     int
	lost   error
	img    *plugin.Image
	num    int
	pool   *plugin.Pool
	closed bool
}

// New makes fake device idx, with nothing scripted.
func New(Idx int) *Device {
	return &Device{Idx: Idx, lostCh: make(chan struct{}), script: map[scriptKey]Action{},
		mem: map[plugin.Ptr][]byte{}, next: 0x10000, events: map[*Event]struct{}{}, pool: plugin.NewPool(1)}
}

// On scripts the nth (from 1) operation of kind op.
func (d *Device) On(op Op, n int, a Action) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.script[scriptKey{op, n}] = a
	if a.Stall != nil {
		d.stalls = append(d.stalls, a.Stall)
	}
}

// fail makes the nth operation of kind op fail with err (for queue
// operations: when the queue runs it).
func (d *Device) Fail(op Op, n int, err error) { d.On(op, n, Action{Err: err}) }

// StallAt holds the nth operation of kind op until the Stall is released.
func (d *Device) StallAt(op Op, n int) *Stall {
	s := NewStall()
	d.On(op, n, Action{Stall: s})
	return s
}

// die makes the device lost: operations pending in its queues and every later
// operation fail with an error wrapping plugin.ErrDeviceLost, and its events
// that have not fired fire with that error.
func (d *Device) Die() {
	d.mu.Lock()
	if d.lost != nil {
		d.mu.Unlock()
		return
	}
	d.lost = fmt.Errorf("fake device %d: %w: killed by the test", d.Idx, plugin.ErrDeviceLost)
	close(d.lostCh)
	evs := make([]*Event, 0, len(d.events))
	for ev := range d.events {
		evs = append(evs, ev)
	}
	err := d.lost
	d.mu.Unlock()
	for _, ev := range evs {
		ev.ev.Fire(err)
	}
}

// LostErr is the error the device died with, or nil.
func (d *Device) LostErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost
}

// ReleaseAll releases every Stall scripted on the device.
func (d *Device) ReleaseAll() {
	d.mu.Lock()
	ss := append([]*Stall(nil), d.stalls...)
	d.mu.Unlock()
	for _, s := range ss {
		s.Release()
	}
}

// CallsOf returns the recorded calls of kind op, in order.
func (d *Device) CallsOf(op Op) []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Call
	for _, c := range d.calls {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// AllCalls returns every recorded call, in order.
func (d *Device) AllCalls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Call(nil), d.calls...)
}

// LiveAllocs is the number of allocations not freed.
func (d *Device) LiveAllocs() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.mem)
}

// LiveEvents is the number of events not closed.
func (d *Device) LiveEvents() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.events)
}

// begin counts an operation of kind op and returns its scripted Action, or
// the device's error if it is lost or closed.
func (d *Device) begin(op Op) (Action, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counts[op]++
	a := d.script[scriptKey{op, d.counts[op]}]
	switch {
	case d.lost != nil:
		return a, d.lost
	case d.closed:
		return a, fmt.Errorf("fake device %d: %w: device is closed", d.Idx, plugin.ErrBadHandle)
	}
	return a, nil
}

// act stalls and fails as a says, once the operation is there.
func (d *Device) act(a Action) error {
	if a.Stall != nil {
		a.Stall.wait()
	}
	if err := d.LostErr(); err != nil {
		return err
	}
	return a.Err
}

func (d *Device) record(c Call) {
	d.mu.Lock()
	d.calls = append(d.calls, c)
	d.mu.Unlock()
}

// call runs a device call (not a queue operation) under the script.
func (d *Device) call(op Op, c *Call, fn func() error) error {
	a, err := d.begin(op)
	if err == nil {
		err = d.act(a)
	}
	if err == nil {
		err = fn()
	}
	if err != nil {
		err = fmt.Errorf("fake device %d: %s: %w", d.Idx, op, err)
	}
	c.Op, c.Err = op, err
	d.record(*c)
	return err
}

// Info implements plugin.Device.
func (d *Device) Info() plugin.Info {
	return plugin.Info{Kind: "fake", Name: fmt.Sprintf("fake device %d", d.Idx), Cores: 1, Arch: "fake", Host: "test"}
}

// Load implements plugin.Device.
func (d *Device) Load(img *plugin.Image, num int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.img, d.num = img, num
	return nil
}

// Alloc implements plugin.Device, as scripted.
func (d *Device) Alloc(size int64) (plugin.Ptr, error) {
	var p plugin.Ptr
	c := Call{Size: size}
	err := d.call(OpAlloc, &c, func() error {
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

// Free implements plugin.Device, as scripted.
func (d *Device) Free(p plugin.Ptr) error {
	return d.call(OpFree, &Call{Ptr: p}, func() error {
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
func (d *Device) bytes(p plugin.Ptr, size int64) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for base, b := range d.mem {
		if size >= 0 && p >= base && p <= base+plugin.Ptr(len(b)) && size <= int64(len(b))-int64(p-base) {
			return b[p-base : int64(p-base)+size], nil
		}
	}
	return nil, fmt.Errorf("fake device %d: %w: [%#x, +%d)", d.Idx, plugin.ErrBadPointer, uint64(p), size)
}

// NewQueue implements plugin.Device, as scripted.
func (d *Device) NewQueue() (plugin.Queue, error) {
	var q *queue
	err := d.call(OpNewQueue, &Call{}, func() error {
		d.mu.Lock()
		d.nq++
		q = &queue{d: d, id: d.nq, q: opqueue.New()}
		d.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return q, nil
}

// NewEvent implements plugin.Device, as scripted.
func (d *Device) NewEvent() (plugin.Event, error) {
	var ev *Event
	err := d.call(OpNewEvent, &Call{}, func() error {
		ev = &Event{d: d, ev: opqueue.NewEvent()}
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

// CanWait accepts the events of every fake device if ForeignWait is set.
func (d *Device) CanWait(ev plugin.Event) bool {
	fe, ok := ev.(*Event)
	return ok && (fe.d == d || d.ForeignWait)
}

// Close implements plugin.Device.
func (d *Device) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.pool.Close()
	return nil
}

// queue is an in-order queue of a fake device.
type queue struct {
	d  *Device
	id int
	q  *opqueue.Queue
}

// enqueue counts, scripts and records a queue operation; run (nil for
// Record and Wait, which then follow on the queue) is what the operation does
// when the queue gets to it.
func (q *queue) enqueue(op Op, c Call, run func() error) error {
	d := q.d
	a, err := d.begin(op)
	if err == nil && a.AtCall {
		err = d.act(a)
		a = Action{}
	}
	if err == nil && run == nil && (a.Stall != nil || a.Err != nil) {
		err = q.q.Do(func() error { return d.act(a) })
	} else if err == nil && run != nil {
		err = q.q.Do(func() error {
			if a.After {
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
		err = fmt.Errorf("fake device %d: queue %d: %s: %w", d.Idx, q.id, op, err)
	}
	c.Op, c.Queue, c.Err = op, q.id, err
	d.record(c)
	return err
}

func (q *queue) Submit(dst plugin.Ptr, src []byte) error {
	b, err := q.d.bytes(dst, int64(len(src)))
	if err != nil {
		return err
	}
	return q.enqueue(OpSubmit, Call{Ptr: dst, Size: int64(len(src))}, func() error { copy(b, src); return nil })
}

func (q *queue) Retrieve(dst []byte, src plugin.Ptr) error {
	b, err := q.d.bytes(src, int64(len(dst)))
	if err != nil {
		return err
	}
	return q.enqueue(OpRetrieve, Call{Ptr: src, Size: int64(len(dst))}, func() error { copy(dst, b); return nil })
}

// Exchange copies within the device, as the contract requires; to another
// device it is unsupported (the core stages such copies through the host).
func (q *queue) Exchange(dst plugin.Device, dstPtr, src plugin.Ptr, size int64) error {
	if other, ok := dst.(*Device); !ok || other != q.d {
		q.d.record(Call{Op: OpExchange, Queue: q.id, Ptr: src, Size: size})
		return fmt.Errorf("fake device %d: exchange: %w", q.d.Idx, plugin.ErrUnsupported)
	}
	from, err := q.d.bytes(src, size)
	if err != nil {
		return err
	}
	to, err := q.d.bytes(dstPtr, size)
	if err != nil {
		return err
	}
	return q.enqueue(OpExchange, Call{Ptr: src, Size: size}, func() error { copy(to, from); return nil })
}

func (q *queue) Launch(pk plugin.Kernel, args []plugin.Arg) error {
	d := q.d
	d.mu.Lock()
	img, num := d.img, d.num
	d.mu.Unlock()
	k, _ := pk.(*entries.Kernel)
	if img == nil || k == nil || k.Index() < 0 || k.Index() >= len(img.Kernels) || img.Kernels[k.Index()] != pk {
		return fmt.Errorf("fake device %d: %w: kernel not in the loaded image", d.Idx, plugin.ErrBadKernel)
	}
	vals, err := k.ArgValues(args, d.bytes)
	if err != nil {
		return err
	}
	ctx := plugin.NewKernelCtx(num, d.pool)
	c := Call{Kernel: k.Name()}
	if len(args) > 0 {
		c.Ptr = args[0].Ptr
	}
	return q.enqueue(OpLaunch, c, func() error { return k.Call(ctx, vals) })
}

func (q *queue) Record(e plugin.Event) error {
	ev, ok := e.(*Event)
	if !ok || ev.d != q.d {
		return fmt.Errorf("fake device %d: record: %w: event %T is not of this device", q.d.Idx, plugin.ErrBadHandle, e)
	}
	if err := q.enqueue(OpRecord, Call{Event: ev}, nil); err != nil {
		return err
	}
	return q.q.Record(ev.ev)
}

func (q *queue) Wait(e plugin.Event) error {
	ev, ok := e.(*Event)
	if !ok || !q.d.CanWait(e) {
		q.d.record(Call{Op: OpWait, Queue: q.id, Err: plugin.ErrUnsupported})
		return fmt.Errorf("fake device %d: wait on %T: %w", q.d.Idx, e, plugin.ErrUnsupported)
	}
	if err := q.enqueue(OpWait, Call{Event: ev}, nil); err != nil {
		return err
	}
	return q.q.Wait(ev.ev)
}

// Synchronize waits for the queue; a lost device answers at once.
func (q *queue) Synchronize() error {
	d := q.d
	a, err := d.begin(OpSynchronize)
	if err == nil {
		err = d.act(a)
	}
	if err == nil {
		done := make(chan error, 1)
		go func() { done <- q.q.Synchronize() }()
		select {
		case err = <-done:
			if err == nil {
				err = d.LostErr()
			}
		case <-d.lostCh:
			err = d.LostErr()
		}
	}
	if err != nil {
		err = fmt.Errorf("fake device %d: queue %d: synchronize: %w", d.Idx, q.id, err)
	}
	d.record(Call{Op: OpSynchronize, Queue: q.id, Err: err})
	return err
}

func (q *queue) Query() (bool, error) {
	if err := q.d.LostErr(); err != nil {
		return true, err
	}
	return q.q.Query()
}

func (q *queue) Close() error {
	done := make(chan error, 1)
	go func() { done <- q.q.Close() }()
	select {
	case err := <-done:
		return err
	case <-q.d.lostCh:
		return nil
	}
}

// Event is an event of a fake device.
type Event struct {
	d  *Device
	ev *opqueue.Event
}

// Device is the device that made e.
func (e *Event) Device() *Device { return e.d }

// Synchronize implements plugin.Event.
func (e *Event) Synchronize() error { return e.ev.Synchronize() }

// Query implements plugin.Event.
func (e *Event) Query() (bool, error) { return e.ev.Query() }

// Close implements plugin.Event.
func (e *Event) Close() error {
	e.d.mu.Lock()
	delete(e.d.events, e)
	e.d.mu.Unlock()
	return e.ev.Close()
}

// The fake kind: "fake:ID" opens the devices registered under ID.
var sets struct {
	sync.Mutex
	next int
	sets map[int][]*Device
}

func init() {
	plugin.RegisterKind(plugin.Kind{Name: "fake", Open: open, Order: 1000,
		Help: "fake:ID  scripted devices of the runtime's tests"})
}

func open(arg string) ([]plugin.Device, error) {
	id, err := strconv.Atoi(arg)
	sets.Lock()
	set, ok := sets.sets[id]
	sets.Unlock()
	if err != nil || !ok {
		return nil, fmt.Errorf("%w: fake:%s: no such set of fake devices", plugin.ErrBadSpec, arg)
	}
	out := make([]plugin.Device, len(set))
	for i, d := range set {
		out[i] = d
	}
	return out, nil
}

// Register makes devs the devices of the spec it returns ("fake:ID"), until
// forget is called.
func Register(devs []*Device) (spec string, forget func()) {
	sets.Lock()
	defer sets.Unlock()
	if sets.sets == nil {
		sets.sets = map[int][]*Device{}
	}
	sets.next++
	id := sets.next
	sets.sets[id] = devs
	return "fake:" + strconv.Itoa(id), func() {
		sets.Lock()
		delete(sets.sets, id)
		sets.Unlock()
	}
}
