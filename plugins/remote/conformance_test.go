package remote_test

import (
	"testing"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
)

// TestConformance runs the shared plugin suite on two local device
// processes.
func TestConformance(t *testing.T) {
	plugintest.Run(t, func(t *testing.T) []plugin.Device {
		k, _ := plugin.LookupKind("local")
		devs, err := k.Open("2")
		if err != nil {
			t.Fatal(err)
		}
		return devs
	})
}
