package proto

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/goffload/offload/plugin"
)

// Errors cross a link as a Status: a code for the sentinel they wrap, and
// their text. A kernel's panic crosses a link as the error's text followed by
// panicMark and the panic's fields in JSON. So the other side rebuilds the
// *plugin.KernelPanic and shows the same text. errors.As finds it there as on
// a host device.
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

// errText is err's text for the wire: its Error, and the fields of the kernel
// panic it wraps, if any. All of it is within MaxText. The stack, then the
// value, are cut to fit. The text alone is sent if nothing fits.
func errText(err error) string {
	text := err.Error()
	if len(text) > MaxText {
		text = text[:MaxText]
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
		if s := text + panicMark + string(b); len(s) <= MaxText {
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

// splitPanic takes the kernel panic's fields off a text from the wire. It
// returns the error's own text, and the panic (nil if the text carries none).
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

// Error codes carry plugin errors across the wire so errors.Is works on the
// other side.
var codes = []error{
	nil,
	plugin.ErrKernelFailed,
	plugin.ErrBadPointer,
	plugin.ErrBadKernel,
	plugin.ErrOutOfMemory,
	plugin.ErrBadHandle,
	plugin.ErrUnsupported,
	plugin.ErrNotRecorded,
	plugin.ErrDeviceLost,
	ErrFrame,
	ErrMismatch,
	ErrAuth,
}

const codeOther = 255

func errCode(err error) uint8 {
	if err == nil {
		return 0
	}
	for i, c := range codes {
		if c != nil && errors.Is(err, c) {
			return uint8(i)
		}
	}
	return codeOther
}

// wireError is an error that came from the other side of a link.
type wireError struct {
	text  string
	cause error
}

func (e *wireError) Error() string { return e.text }
func (e *wireError) Unwrap() error { return e.cause }

func decodeErr(code uint8, text string) error {
	if code == 0 {
		return nil
	}
	var cause error
	if int(code) < len(codes) {
		cause = codes[code]
	}
	text, kp := splitPanic(text)
	if kp != nil && cause == plugin.ErrKernelFailed {
		cause = kp // wraps ErrKernelFailed
	}
	return &wireError{text: text, cause: cause}
}

// StatusOf is err as a frame carries it. Its code is for the sentinel it
// wraps, which errors.Is finds on the other side. Its text has the fields of
// the kernel panic it wraps, if any.
func StatusOf(err error) Status {
	if err == nil {
		return Status{}
	}
	return Status{Code: errCode(err), Text: errText(err)} // Text: at most proto.MaxText
}

// Err is the error st carries, or nil. It wraps the sentinel st's code names,
// and a *plugin.KernelPanic when the text carries one.
func (st Status) Err() error { return decodeErr(st.Code, st.Text) }

// ErrMismatch is wrapped when a host and a device process run different code:
// their kernel tables or protocol versions differ. They are refused at hello.
var ErrMismatch = errors.New("host and device do not match")

// ErrAuth is wrapped when a host and a TCP device do not share the secret.
var ErrAuth = errors.New("authentication failed")
