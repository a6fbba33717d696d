package remote

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/engine"
)

// Proxied devices: a device process serves the devices that its own
// GOFFLOAD_DEVICES names (GPUs, OpenCL devices, host devices), each to a
// host as a device of the host's own, through the plugin contract of
// their kind. A local device's host names them in brackets
// (local:2[opencl]) and gives them to each process it starts; a TCP
// device's process names them in its own environment; an MPI job's
// device ranks read them from the mpi item's brackets (mpi[opencl]),
// which every rank's GOFFLOAD_DEVICES holds alike.

// envServe is what a device process serves, as GOFFLOAD_DEVICES items.
const envServe = "GOFFLOAD_DEVICES"

// splitServed splits a spec argument "N[SPEC]" into "N" and SPEC, the
// devices each process serves; an argument without brackets has none.
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

// servedItems splits spec into items ("opencl:0", "host"), each a kind
// and its argument, as GOFFLOAD_DEVICES has them.
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

// checkServedSpec checks spec's items on the host: each names a kind this
// build has (the device processes are the same build).
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
// device process: each session opens them anew and keeps device index,
// closing the others. An empty spec serves the process's CPUs (nil).
// wrap, if set, maps a session's index to the device it serves (local
// processes serve device i mod count).
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
