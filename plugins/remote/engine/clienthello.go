package engine

import (
	"encoding/json"
	"fmt"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
)

// hello greets the device process and checks that it runs our code.
func (d *Device) hello(img *plugin.Image, num int) error {
	// The heartbeat starts after hello. Until then, the device timeout bounds
	// the wait for the device's hello. (A process may stop or hang before it
	// serves. A tcp:// device may prove the secret and say nothing.)
	_, timeout := timing()
	if timeout > 0 {
		timeout = max(timeout, d.Startup)
	}
	stop := d.l.within(timeout, "hello from the device")
	defer stop()
	if err := d.l.send(&proto.Hello{Num: uint32(max(num, 0)), Status: proto.Status{Text: helloText(img)}}); err != nil {
		return d.l.readErr(err)
	}
	m, err := d.l.r.ReadMsg()
	stop()
	if err != nil {
		return fmt.Errorf("reading the device's hello: %w", d.l.readErr(err))
	}
	if m.Type != proto.THello {
		return fmt.Errorf("%w: want hello, got %s", proto.ErrFrame, m.Type)
	}
	f, err := proto.As[proto.Hello](m)
	if err != nil {
		return err
	}
	if err := f.Status.Err(); err != nil {
		return fmt.Errorf("the device refused the host: %w", err)
	}
	h, err := parseHello(f.Text)
	if err != nil {
		return err
	}
	if err := checkImage(h, img, "host"); err != nil {
		d.l.send(&proto.Exit{})
		return err
	}
	d.count = h.count
	d.mu.Lock()
	d.reading = true
	d.mu.Unlock()
	d.l.live(timingFor(h.timeout))
	go d.read()
	return nil
}

// Serve picks device index of those the device process serves, before Load.
// It returns how many it serves and the one picked (its kind and name).
// Without it, a proxying process serves its first device.
func (d *Device) Serve(index int) (count int, name string, err error) {
	count, text, err := d.serve(index)
	if err != nil || text == "Go CPU device" {
		return count, text, err
	}
	var v struct {
		Name           string
		Token, Process uint64
	}
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return 0, "", fmt.Errorf("%s: %w: serve: %v", d.name(), proto.ErrFrame, err)
	}
	d.token, d.process = v.Token, v.Process
	return count, v.Name, nil
}

// Process is the device process's number (0 for one that serves its CPUs).
// Sessions with one process of the same number are siblings.
func (d *Device) Process() uint64 { return d.process }

// Sibling tells d that o is served by the same device process. The two link
// inside it (a Sibling frame to d). Both are loaded.
func (d *Device) Sibling(o *Device) error {
	if d.process == 0 || d.process != o.process {
		return fmt.Errorf("%w: devices %d and %d are not served by one process", plugin.ErrUnsupported, d.num, o.num)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.st.Alive(); err != nil {
		return err
	}
	if err := d.l.send(&proto.Sibling{Peer: uint32(o.num), Token: o.token}); err != nil {
		return d.linkLost(err)
	}
	return nil
}

func (d *Device) serve(index int) (count int, text string, err error) {
	_, timeout := timing()
	if timeout > 0 {
		timeout = max(timeout, d.Startup)
	}
	stop := d.l.within(timeout, "answer to serve from the device")
	defer stop()
	if err := d.l.send(&proto.Serve{Req: 1, Index: uint32(index)}); err != nil {
		return 0, "", fmt.Errorf("%s: %w", d.name(), d.l.readErr(err))
	}
	m, err := d.l.r.ReadMsg()
	if err != nil {
		return 0, "", fmt.Errorf("%s: reading the answer to serve: %w", d.name(), d.l.readErr(err))
	}
	r, err := proto.As[proto.Reply](m)
	if err != nil {
		return 0, "", fmt.Errorf("%s: %w", d.name(), err)
	}
	if err := r.Status.Err(); err != nil {
		return int(r.Value), "", fmt.Errorf("%s: %w", d.name(), err)
	}
	return int(r.Value), r.Status.Text, nil
}
