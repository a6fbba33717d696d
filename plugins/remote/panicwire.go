package remote

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
)

// A kernel's panic crosses a link as the error's text followed by panicMark
// and the panic's fields in JSON, so the other side rebuilds the
// *plugin.KernelPanic (errors.As finds it there as on a host device) and
// shows the same text.
const panicMark = "\x00goffload-kernel-panic\x00"

// wirePanic is what crosses of a *plugin.KernelPanic.
type wirePanic struct {
	Kernel string `json:"kernel"`
	Value  string `json:"value,omitempty"`
	Goexit bool   `json:"goexit,omitempty"`
	Chunk  bool   `json:"chunk,omitempty"`
	At     string `json:"at,omitempty"`
	Stack  string `json:"stack,omitempty"`
}

// errText is err's text for the wire: its Error, and the fields of the
// kernel panic it wraps, if any, all within proto.MaxText (the stack, then
// the value, are cut to fit; the text alone is sent if nothing fits).
func errText(err error) string {
	text := err.Error()
	if len(text) > proto.MaxText {
		text = text[:proto.MaxText]
	}
	var kp *plugin.KernelPanic
	if !errors.As(err, &kp) {
		return text
	}
	w := wirePanic{Kernel: kp.Kernel, Value: kp.Value, Goexit: kp.Goexit, Chunk: kp.Chunk, At: kp.At, Stack: kp.Stack}
	for {
		b, jerr := json.Marshal(w)
		if jerr != nil {
			return text
		}
		if s := text + panicMark + string(b); len(s) <= proto.MaxText {
			return s
		}
		switch {
		case w.Stack != "":
			w.Stack = w.Stack[:len(w.Stack)/2]
		case len(w.Value) > 1024:
			w.Value = w.Value[:1024]
		default:
			return text
		}
	}
}

// splitPanic takes the kernel panic's fields off a text from the wire: the
// error's own text, and the panic (nil if the text carries none).
func splitPanic(text string) (string, *plugin.KernelPanic) {
	i := strings.Index(text, panicMark)
	if i < 0 {
		return text, nil
	}
	var w wirePanic
	if err := json.Unmarshal([]byte(text[i+len(panicMark):]), &w); err != nil {
		return text[:i], nil
	}
	return text[:i], &plugin.KernelPanic{Kernel: w.Kernel, Value: w.Value, Goexit: w.Goexit, Chunk: w.Chunk, At: w.At, Stack: w.Stack}
}
