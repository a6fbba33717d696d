package remote

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/goffload/offload/internal/opqueue"
	"github.com/goffload/offload/internal/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
)

// device is the host side of a remote device: it turns plugin calls into
// frames and frames back into results. One goroutine reads the link.
type device struct {
	l    *link
	name string // "remote device 1 (pid 1234)"
	num  int    // device number, from Load
	info plugin.Info
	// count is how many kernels the device process has (a prefix of ours).
	count int
	// onLost, if set, explains a broken link (the process's exit status).
	onLost func(error) error
	// closeFn releases what the transport holds (the process, the socket).
	closeFn func() error
	// setNum, if set, tells the transport the device's number.
	setNum func(int)
	// forgets are events closed after they fired, for the device to forget,
	// sent in batches.
	forgets []uint64
	// side is the channel the host introduces device processes to each
	// other on (nil for devices that are not processes of this machine).
	side *net.UnixConn

	mu         sync.Mutex
	next       uint64
	nq         uint32
	replies    map[uint64]chan *proto.Msg
	syncs      map[uint64]chan error
	events     map[uint64]*event
	pushes     map[uint64][]byte    // pulled submits: data the device will pull
	pulls      map[uint64]*incoming // retrieves: where arriving data goes
	lost       error
	closed     bool
	reading    bool
	readerDone chan struct{}
}

func newDevice(l *link, name string) *device {
	return &device{
		l: l, name: name,
		replies:    map[uint64]chan *proto.Msg{},
		syncs:      map[uint64]chan error{},
		events:     map[uint64]*event{},
		pushes:     map[uint64][]byte{},
		pulls:      map[uint64]*incoming{},
		readerDone: make(chan struct{}),
	}
}

func (d *device) id() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next++
	return d.next
}

// hello greets the device process and checks that it runs our code.
func (d *device) hello(img *plugin.Image, num int) error {
	if err := d.l.send(&proto.Msg{Type: proto.THello, Kernel: uint32(max(num, 0)), Text: helloText(img)}, nil); err != nil {
		return err
	}
	m, err := d.l.r.ReadMsg()
	if err != nil {
		return fmt.Errorf("reading the device's hello: %w", err)
	}
	if m.Type != proto.THello {
		return fmt.Errorf("%w: want hello, got %s", proto.ErrFrame, m.Type)
	}
	if err := decodeErr(m.Code, m.Text); err != nil {
		return fmt.Errorf("the device refused the host: %w", err)
	}
	h, err := parseHello(m.Text)
	if err != nil {
		return err
	}
	if err := checkImage(h, img, "host"); err != nil {
		d.l.send(withErr(&proto.Msg{Type: proto.TExit}, err), nil)
		return err
	}
	d.count = h.count
	d.mu.Lock()
	d.reading = true
	d.mu.Unlock()
	go d.read()
	return nil
}

// read dispatches the device's frames until the link ends.
func (d *device) read() {
	defer close(d.readerDone)
	for {
		m, err := d.l.r.ReadMsg()
		if err == nil {
			err = d.dispatch(m)
		}
		if err != nil {
			d.lose(err)
			return
		}
	}
}

func (d *device) dispatch(m *proto.Msg) error {
	switch m.Type {
	case proto.TReply:
		ch, _ := take(&d.mu, d.replies, m.ID)
		if ch == nil {
			return fmt.Errorf("%w: reply to unknown request %d", proto.ErrFrame, m.ID)
		}
		c := *m
		c.Payload = nil
		ch <- &c
	case proto.TSyncDone:
		ch, _ := take(&d.mu, d.syncs, m.ID)
		if ch == nil {
			return fmt.Errorf("%w: sync reply %d unknown", proto.ErrFrame, m.ID)
		}
		ch <- decodeErr(m.Code, m.Text)
	case proto.TEvent:
		d.mu.Lock()
		ev := d.events[m.ID]
		var implies []*event
		forget := false
		if ev != nil {
			ev.heard = true
			implies, ev.implies = ev.implies, nil
			if ev.closed {
				delete(d.events, m.ID)
				forget = true
			}
		}
		d.mu.Unlock()
		if ev == nil {
			return fmt.Errorf("%w: unknown event %d fired", proto.ErrFrame, m.ID)
		}
		err := decodeErr(m.Code, m.Text)
		if err == nil {
			pastWaits(implies)
		}
		ev.ev.Fire(err)
		if forget {
			d.forget(m.ID)
		}
	case proto.TPull:
		data, ok := take(&d.mu, d.pushes, m.ID)
		if !ok {
			return fmt.Errorf("%w: pull of unknown transfer %d", proto.ErrFrame, m.ID)
		}
		go func() {
			if err := d.l.sendData(m.ID, data); err != nil {
				d.lose(err)
			}
		}()
	case proto.TData:
		return d.data(m)
	default:
		return fmt.Errorf("%w: unexpected %s frame from the device", proto.ErrFrame, m.Type)
	}
	return nil
}

// data reads a retrieve's fragment straight into the caller's memory.
func (d *device) data(m *proto.Msg) error {
	in, err := receive(&d.mu, d.pulls, d.l.r, m)
	if in == nil {
		return err
	}
	// Tell the device the data is in host memory: it holds back telling
	// other devices about events after this copy until then.
	return d.l.send(&proto.Msg{Type: proto.TXferDone, ID: m.ID}, nil)
}

// lose fails the device: every pending and later operation returns an
// error naming the device and the cause.
func (d *device) lose(cause error) {
	d.mu.Lock()
	if d.lost != nil {
		d.mu.Unlock()
		return
	}
	if d.closed && isClosedErr(cause) {
		cause = errors.New("device closed")
	} else if d.onLost != nil {
		cause = d.onLost(cause)
	}
	err := fmt.Errorf("%s: %w: %v", d.name, plugin.ErrDeviceLost, cause)
	d.lost = err
	replies, syncs, events := d.replies, d.syncs, d.events
	d.replies, d.syncs, d.pushes, d.pulls = map[uint64]chan *proto.Msg{}, map[uint64]chan error{}, map[uint64][]byte{}, map[uint64]*incoming{}
	d.mu.Unlock()
	d.l.fail(err)
	for _, ch := range replies {
		ch <- withErr(&proto.Msg{Type: proto.TReply}, err)
	}
	for _, ch := range syncs {
		ch <- err
	}
	for _, ev := range events {
		ev.ev.Fire(err)
	}
}

func (d *device) alive() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost != nil {
		return d.lost
	}
	if d.closed {
		return fmt.Errorf("%s: %w: device is closed", d.name, plugin.ErrBadHandle)
	}
	return nil
}

// call sends a request and waits for its reply.
func (d *device) call(m *proto.Msg) (*proto.Msg, error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	ch := make(chan *proto.Msg, 1)
	m.ID = d.id()
	d.mu.Lock()
	d.replies[m.ID] = ch
	d.mu.Unlock()
	if err := d.l.send(m, nil); err != nil {
		d.lose(err)
	}
	r := <-ch
	if err := decodeErr(r.Code, r.Text); err != nil {
		return nil, fmt.Errorf("%s: %w", d.name, err)
	}
	return r, nil
}

func (d *device) Info() plugin.Info { return d.info }

func (d *device) fetchInfo() error {
	r, err := d.call(&proto.Msg{Type: proto.TInfo})
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(r.Text), &d.info); err != nil {
		return fmt.Errorf("%s: %w: info: %v", d.name, proto.ErrFrame, err)
	}
	d.info.Kind = "remote"
	return nil
}

// Load greets the device process, which checks that both run the same code,
// and asks it to describe itself.
func (d *device) Load(img *plugin.Image, num int) error {
	d.num = num
	if d.setNum != nil {
		d.setNum(num)
	}
	if err := d.hello(img, num); err != nil {
		err = fmt.Errorf("%s: %w", d.name, err)
		d.lose(err)
		return err
	}
	d.name = fmt.Sprintf("remote device %d (pid %d)", num, d.info.PID)
	if err := d.fetchInfo(); err != nil {
		return err
	}
	d.name = fmt.Sprintf("remote device %d (pid %d)", num, d.info.PID)
	return nil
}

func (d *device) Alloc(size int64) (plugin.Ptr, error) {
	if size < 0 {
		return 0, fmt.Errorf("%s: %w: negative size %d", d.name, plugin.ErrBadPointer, size)
	}
	r, err := d.call(&proto.Msg{Type: proto.TAlloc, Size: uint64(size)})
	if err != nil {
		return 0, err
	}
	return plugin.Ptr(r.Ptr), nil
}

func (d *device) Free(p plugin.Ptr) error {
	_, err := d.call(&proto.Msg{Type: proto.TFree, Ptr: uint64(p)})
	return err
}

func (d *device) NewQueue() (plugin.Queue, error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.nq++
	id := d.nq
	d.mu.Unlock()
	return &queue{d: d, id: id}, nil
}

// forget tells the device, in batches, that an event is closed and fired:
// no queue will wait on it again.
func (d *device) forget(id uint64) {
	d.mu.Lock()
	d.forgets = append(d.forgets, id)
	var batch []byte
	if len(d.forgets) >= 512 {
		for _, id := range d.forgets {
			batch = binary.LittleEndian.AppendUint64(batch, id)
		}
		d.forgets = d.forgets[:0]
	}
	d.mu.Unlock()
	if batch != nil {
		if err := d.l.send(&proto.Msg{Type: proto.TForget}, batch); err != nil {
			d.lose(err)
		}
	}
}

// CanWait reports whether d's queues can wait on ev themselves: events of d,
// and of other device processes on this machine, which tell d directly when
// they fire.
func (d *device) CanWait(ev plugin.Event) bool {
	e, ok := ev.(*event)
	return ok && (e.d == d || (e.d.side != nil && d.side != nil))
}

func (d *device) NewEvent() (plugin.Event, error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	ev := &event{d: d, id: d.id(), ev: opqueue.NewEvent()}
	d.mu.Lock()
	d.events[ev.id] = ev
	d.mu.Unlock()
	return ev, nil
}

// Close tells the device process to exit and releases the transport.
func (d *device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.l.send(&proto.Msg{Type: proto.TExit}, nil)
	forget(d)
	if d.side != nil {
		d.side.Close()
	}
	var err error
	if d.closeFn != nil {
		err = d.closeFn()
	}
	d.l.fail(errors.New("device closed"))
	if d.reading {
		<-d.readerDone
	}
	return err
}
