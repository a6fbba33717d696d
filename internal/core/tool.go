package core

import "github.com/goffload/offload/tool"

// The tool interface's names, as the core uses them: package tool
// declares them (offload.WithTool hands the user's Tool to the core as it
// is).
type (
	Tool          = tool.Tool
	DeviceOpTool  = tool.DeviceOpTool
	DeviceOpEvent = tool.DeviceOpEvent
	Where         = tool.Where
	TargetEvent   = tool.TargetEvent
	DataKind      = tool.DataKind
	DataEvent     = tool.DataEvent
	KernelEvent   = tool.KernelEvent
	WaitEvent     = tool.WaitEvent
)

// The data operations a DataEvent reports.
const (
	CopyToDevice       = tool.CopyToDevice
	CopyFromDevice     = tool.CopyFromDevice
	CopyDeviceToDevice = tool.CopyDeviceToDevice
	MapCreate          = tool.MapCreate
	MapRemove          = tool.MapRemove
)

// tools sends every event to each of a list of tools.
type tools []Tool

func (ts tools) TargetBegin(e TargetEvent) {
	for _, t := range ts {
		t.TargetBegin(e)
	}
}

func (ts tools) TargetEnd(e TargetEvent) {
	for _, t := range ts {
		t.TargetEnd(e)
	}
}

func (ts tools) DataOp(e DataEvent) {
	for _, t := range ts {
		t.DataOp(e)
	}
}

func (ts tools) KernelLaunch(e KernelEvent) {
	for _, t := range ts {
		t.KernelLaunch(e)
	}
}

func (ts tools) Wait(e WaitEvent) {
	for _, t := range ts {
		t.Wait(e)
	}
}

// DeviceOp sends e to the tools that take device operations.
func (ts tools) DeviceOp(e DeviceOpEvent) {
	for _, t := range ts {
		if dt, ok := t.(DeviceOpTool); ok {
			dt.DeviceOp(e)
		}
	}
}

// wantOps reports whether one of the tools takes device operations.
func (ts tools) wantOps() bool {
	for _, t := range ts {
		if _, ok := t.(DeviceOpTool); ok {
			return true
		}
	}
	return false
}
