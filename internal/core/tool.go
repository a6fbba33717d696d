package core

import "github.com/goffload/offload/tool"

// tools sends every event to each of a list of tools.
type tools []tool.Tool

func (ts tools) TargetBegin(e tool.TargetEvent) {
	for _, t := range ts {
		t.TargetBegin(e)
	}
}

func (ts tools) TargetEnd(e tool.TargetEvent) {
	for _, t := range ts {
		t.TargetEnd(e)
	}
}

func (ts tools) DataOp(e tool.DataEvent) {
	for _, t := range ts {
		t.DataOp(e)
	}
}

func (ts tools) KernelLaunch(e tool.KernelEvent) {
	for _, t := range ts {
		t.KernelLaunch(e)
	}
}

func (ts tools) Wait(e tool.WaitEvent) {
	for _, t := range ts {
		t.Wait(e)
	}
}

// DeviceOp sends e to the tools that take device operations.
func (ts tools) DeviceOp(e tool.DeviceOpEvent) {
	for _, t := range ts {
		if dt, ok := t.(tool.DeviceOpTool); ok {
			dt.DeviceOp(e)
		}
	}
}

// wantOps reports whether one of the tools takes device operations.
func (ts tools) wantOps() bool {
	for _, t := range ts {
		if _, ok := t.(tool.DeviceOpTool); ok {
			return true
		}
	}
	return false
}
