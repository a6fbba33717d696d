package remote

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/engine"
	"github.com/goffload/offload/plugins/remote/stream"
	"github.com/goffload/offload/plugins/remote/transport"
)

// Proxied devices: a device process serves the devices that its own
// GOFFLOAD_DEVICES names (GPUs, OpenCL devices, host devices). It serves each
// to a host as a device of the host's own, through the plugin contract of
// their kind. A local device's host names them in brackets (local:2[opencl])
// and gives them to each process it starts. A TCP device's process names them
// in its own environment. An MPI job's device ranks read them from the mpi
// item's brackets (mpi[opencl]). Every rank's GOFFLOAD_DEVICES holds those
// alike.

// envServe is what a device process serves, as GOFFLOAD_DEVICES items.
const envServe = "GOFFLOAD_DEVICES"

// splitServed splits a spec argument "N[SPEC]" into "N" and SPEC, the devices
// each process serves. An argument without brackets has none.
func splitServed(kind, arg string) (string, string, error) {
	i := strings.IndexByte(arg, '[')
	if i < 0 {
		if strings.ContainsRune(arg, ']') {
			return "", "", fmt.Errorf("%w: %s:%s: a ']' without '['; want %s:N[KIND]", plugin.ErrBadSpec, kind, arg, kind)
		}
		return arg, "", nil
	}
	spec, ok := strings.CutSuffix(arg[i+1:], "]")
	if !ok || strings.ContainsAny(spec, "[]") {
		return "", "", fmt.Errorf("%w: %s:%s: want %s:N[KIND], the served devices' items inside one pair of brackets at the end", plugin.ErrBadSpec, kind, arg, kind)
	}
	if strings.TrimSpace(spec) == "" {
		return "", "", fmt.Errorf("%w: %s:%s: nothing between the brackets; want %s:N[KIND], such as %s:1[opencl]", plugin.ErrBadSpec, kind, arg, kind, kind)
	}
	if err := checkServedSpec(spec); err != nil {
		return "", "", fmt.Errorf("%w: %s:%s: %w", plugin.ErrBadSpec, kind, arg, err)
	}
	return arg[:i], spec, nil
}

// servedItems splits spec into items ("opencl:0", "host"), each a kind and
// its argument. GOFFLOAD_DEVICES has them so.
func servedItems(spec string) ([][2]string, error) {
	var items [][2]string
	for _, item := range strings.FieldsFunc(spec, func(r rune) bool { return r == '+' || r == ',' }) {
		item = strings.TrimSpace(item)
		kind, arg, _ := strings.Cut(item, ":")
		kind = strings.ToLower(kind)
		if kind == "" {
			return nil, fmt.Errorf("an empty served item in %q; want items such as cuda+opencl", spec)
		}
		switch kind {
		case "local", "tcp", "mpi":
			return nil, fmt.Errorf("a device process cannot serve %s devices (%q): it serves devices of its own process", kind, item)
		}
		items = append(items, [2]string{kind, arg})
	}
	return items, nil
}

// checkServedSpec checks spec's items on the host. Each must name a kind this
// build has; the device processes are the same build.
func checkServedSpec(spec string) error {
	items, err := servedItems(spec)
	if err != nil {
		return err
	}
	for _, it := range items {
		if _, ok := plugin.LookupKind(it[0]); !ok {
			return fmt.Errorf("unknown device kind %q to serve", it[0])
		}
	}
	return nil
}

// servedOpener is the engine's opener of the devices spec names, in this
// device process. Each session opens them anew and keeps device index,
// closing the others. An empty spec serves the process's CPUs (nil). wrap, if
// set, maps a session's index to the device it serves. (Local processes serve
// device i mod count.)
func servedOpener(spec string, wrap bool) (engine.Opener, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	items, err := servedItems(spec)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", envServe, spec, err)
	}
	return func(index int) (plugin.Device, string, int, error) {
		var devs []plugin.Device
		var kinds []string
		var errs []error
		for _, it := range items {
			k, ok := plugin.LookupKind(it[0])
			if !ok {
				errs = append(errs, fmt.Errorf("unknown device kind %q", it[0]))
				continue
			}
			ds, err := k.Open(it[1])
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", specOf(it), err))
			}
			for _, d := range ds {
				devs = append(devs, d)
				kinds = append(kinds, k.Name)
			}
		}
		n := len(devs)
		if n == 0 {
			err := errors.Join(errs...)
			if err == nil {
				err = plugin.ErrNoDevices
			}
			return nil, "", 0, fmt.Errorf("pid %d serves %s=%q: %w: %w", os.Getpid(), envServe, spec, plugin.ErrNoDevices, err)
		}
		pick := index
		if wrap {
			pick = index % n
		}
		if pick < 0 || pick >= n {
			for _, d := range devs {
				d.Close()
			}
			return nil, "", n, fmt.Errorf("%w: device %d of the %d that pid %d serves (%s=%q)", plugin.ErrBadSpec, index, n, os.Getpid(), envServe, spec)
		}
		for i, d := range devs {
			if i != pick {
				d.Close()
			}
		}
		return devs[pick], kinds[pick], n, nil
	}, nil
}

func specOf(it [2]string) string {
	if it[1] == "" {
		return it[0]
	}
	return it[0] + ":" + it[1]
}

// Sessions of one TCP device process that serve devices of this host are
// siblings. The host introduces them to each other, and they link inside
// their process (engine.Device.Sibling). So a copy or a wait between two of
// its devices never crosses the network.

// siblingIntros are the introducers of the device processes this host has
// sessions with, by process number. Devices of one process share one.
var siblingIntros = struct {
	sync.Mutex
	by map[uint64]*siblingIntro
}{by: map[uint64]*siblingIntro{}}

// siblingsOf is the introducer of process proc's devices. It is nil for a
// process that serves its CPUs (0): those sessions have no siblings.
func siblingsOf(proc uint64) engine.Introducer {
	if proc == 0 {
		return nil
	}
	siblingIntros.Lock()
	defer siblingIntros.Unlock()
	si := siblingIntros.by[proc]
	if si == nil {
		si = &siblingIntro{done: map[[2]*engine.Device]bool{}}
		siblingIntros.by[proc] = si
	}
	return si
}

// siblingIntro introduces the devices of one process to each other, once
// a pair.
type siblingIntro struct {
	mu   sync.Mutex
	done map[[2]*engine.Device]bool
}

func (si *siblingIntro) Introduce(a, b *engine.Device) error {
	key := [2]*engine.Device{a, b}
	if a.Num() > b.Num() {
		key = [2]*engine.Device{b, a}
	}
	si.mu.Lock()
	defer si.mu.Unlock()
	if si.done[key] {
		return nil
	}
	if err := key[0].Sibling(key[1]); err != nil {
		return err
	}
	si.done[key] = true
	return nil
}

func (si *siblingIntro) Forget(d *engine.Device) {
	si.mu.Lock()
	defer si.mu.Unlock()
	for k := range si.done {
		if k[0] == d || k[1] == d {
			delete(si.done, k)
		}
	}
}

// pairLinks makes a link inside this process, for two sibling sessions. It is
// the two ends of a socket pair.
func pairLinks() (transport.Transport, transport.Transport, error) {
	fds, err := stream.SocketPair()
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	var ts [2]transport.Transport
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "goffload-sibling")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if i == 1 {
				ts[0].Close()
			} else {
				syscall.Close(fds[1])
			}
			return nil, nil, err
		}
		ts[i] = stream.New(c)
	}
	return ts[0], ts[1], nil
}
