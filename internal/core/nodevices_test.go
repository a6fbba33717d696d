package core

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/plugin"
)

// The "nodev" kind finds no devices and says why (plugin.ErrNoDevices), as
// the cuda kind does on a machine without a GPU; nodevOn makes its
// Discover do so (off: it discovers nothing, silently, so that the other
// tests' discovery is unchanged).
var nodevOn atomic.Bool

const nodevWhy = "no scripted GPU (nodev test kind)"

func init() {
	plugin.RegisterKind(plugin.Kind{
		Name: "nodev",
		Open: func(arg string) ([]plugin.Device, error) {
			if arg != "" {
				return nil, fmt.Errorf("nodev:%s: %s", arg, nodevWhy)
			}
			return nil, fmt.Errorf("%w: %s", plugin.ErrNoDevices, nodevWhy)
		},
		Discover: func() ([]plugin.Device, error) {
			if !nodevOn.Load() {
				return nil, nil
			}
			return nil, fmt.Errorf("%w: %s", plugin.ErrNoDevices, nodevWhy)
		},
		Order: 1001,
		Help:  "nodev  a kind of internal/core's tests that finds no devices",
	})
}

// TestNoDevicesReason: a kind that finds no devices and says why gives
// zero devices and an info line, never an error at Start — except for a
// GOFFLOAD_DEVICES item that names it under MANDATORY; an item that names
// one device of it keeps the number as an unavailable device.
func TestNoDevicesReason(t *testing.T) {
	nodevOn.Store(true)
	defer nodevOn.Store(false)
	for _, c := range []struct {
		name        string
		cfg         config.Config
		devices     int
		wantErr     bool
		wantInfo    bool
		unavailable bool
	}{
		{"discovered", config.Config{}, -1, false, true, false},
		{"discovered, MANDATORY", config.Config{Policy: config.PolicyMandatory}, -1, false, true, false},
		{"named", config.Config{Devices: "nodev", DevicesSet: true}, 0, false, true, false},
		{"named, MANDATORY", config.Config{Devices: "nodev", DevicesSet: true, Policy: config.PolicyMandatory}, 0, true, false, false},
		{"one named", config.Config{Devices: "nodev:0", DevicesSet: true}, 1, false, false, true},
		{"one named, MANDATORY", config.Config{Devices: "nodev:0", DevicesSet: true, Policy: config.PolicyMandatory}, 0, true, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			cfg := c.cfg
			cfg.Info, cfg.InfoOut = config.InfoOffload, &out
			r, err := Start(cfg)
			if c.wantErr {
				if err == nil {
					r.Stop()
					t.Fatal("Start succeeded")
				}
				if !errors.Is(err, ErrMandatory) || !strings.Contains(err.Error(), nodevWhy) {
					t.Errorf("Start = %v, want an error wrapping ErrMandatory that says %q", err, nodevWhy)
				}
				return
			}
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			defer r.Stop()
			if c.devices >= 0 && len(r.Devices) != c.devices {
				t.Errorf("%d devices, want %d", len(r.Devices), c.devices)
			}
			for _, d := range r.Devices {
				if d.Spec == "nodev" {
					t.Errorf("device %d comes from the kind that has none", d.Num)
				}
			}
			if c.unavailable && (len(r.Devices) != 1 || r.Devices[0].Unavailable == nil) {
				t.Errorf("nodev:0: want one unavailable device")
			}
			if got := strings.Contains(out.String(), "nodev: no devices: "+nodevWhy); got != c.wantInfo {
				t.Errorf("info output has the reason: %v, want %v:\n%s", got, c.wantInfo, out.String())
			}
		})
	}
}
