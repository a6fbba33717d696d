package core

import (
	"testing"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
)

// TestFakeConformance runs the shared plugin suite on the fake device the
// core's tests drive, so that it cannot drift from the contract the real
// kinds keep.
func TestFakeConformance(t *testing.T) {
	plugintest.Run(t, func(t *testing.T) []plugin.Device {
		return []plugin.Device{newFakeDevice(0), newFakeDevice(1)}
	})
}
