package offload

import (
	"github.com/goffload/offload/plugin"
	"testing"

	"github.com/goffload/offload/internal/core"
)

// TestKindsMatchRuntime: OpKind and DataKind have the runtime's values
// (the Tool adapter converts them as numbers) and names.
func TestKindsMatchRuntime(t *testing.T) {
	ops := map[OpKind]plugin.OpKind{OpLaunch: plugin.OpLaunch, OpSubmit: plugin.OpSubmit, OpRetrieve: plugin.OpRetrieve, OpExchange: plugin.OpExchange, OpWait: plugin.OpWait}
	for k, c := range ops {
		if uint8(k) != uint8(c) || k.String() != c.String() {
			t.Errorf("OpKind %d %q, the runtime's %d %q", k, k, c, c)
		}
	}
	data := map[DataKind]core.DataKind{CopyToDevice: core.CopyToDevice, CopyFromDevice: core.CopyFromDevice,
		CopyDeviceToDevice: core.CopyDeviceToDevice, MapCreate: core.MapCreate, MapRemove: core.MapRemove}
	for k, c := range data {
		if int(k) != int(c) || k.String() != c.String() {
			t.Errorf("DataKind %d %q, the runtime's %d %q", k, k, c, c)
		}
	}
}

type plainTool struct{ Tool }
type opTool struct{ DeviceOpTool }

// TestCoreTool: the runtime finds a DeviceOpTool by type assertion on the
// adapter, and only there; no tool is no adapter.
func TestCoreTool(t *testing.T) {
	if coreTool(nil) != nil {
		t.Error("coreTool(nil) is not nil")
	}
	if _, ok := coreTool(plainTool{}).(core.DeviceOpTool); ok {
		t.Error("a Tool's adapter is a DeviceOpTool")
	}
	if _, ok := coreTool(opTool{}).(core.DeviceOpTool); !ok {
		t.Error("a DeviceOpTool's adapter is not one")
	}
}
