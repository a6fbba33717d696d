package proto

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/goffload/offload/plugin"
)

// TestPanicOnTheWire: a kernel panic crosses a link with its fields, so the
// host's errors.As finds a *plugin.KernelPanic with the device's text; a
// stack too long for a frame is cut, never the error's text.
func TestPanicOnTheWire(t *testing.T) {
	kp := &plugin.KernelPanic{Kernel: "k", Value: "v", Chunk: true, At: "k.go:3", Stack: "main.k()\n\t/src/k.go:3 +0x1\n"}
	for _, stack := range []string{kp.Stack, strings.Repeat("main.k()\n\t/src/k.go:3 +0x1\n", 10000)} {
		kp.Stack = stack
		sent := fmt.Errorf("local device 0 (pid 1): %w", kp)
		m := StatusOf(sent)
		if len(m.Text) > MaxText {
			t.Fatalf("text of %d bytes, over MaxText", len(m.Text))
		}
		got := decodeErr(m.Code, m.Text)
		var back *plugin.KernelPanic
		if !errors.Is(got, plugin.ErrKernelFailed) || !errors.As(got, &back) || got.Error() != sent.Error() {
			t.Fatalf("decoded %q (%T), want %q with a KernelPanic", got, got, sent)
		}
		if back.Kernel != "k" || back.Value != "v" || !back.Chunk || back.At != "k.go:3" || back.Stack == "" || !strings.HasPrefix(stack, back.Stack) {
			t.Errorf("decoded %+v", back)
		}
	}
	// A mark with garbage after it leaves the text and the code's sentinel.
	got := decodeErr(errCode(plugin.ErrKernelFailed), "boom"+panicMark+"{not json")
	var back *plugin.KernelPanic
	if got.Error() != "boom" || !errors.Is(got, plugin.ErrKernelFailed) || errors.As(got, &back) {
		t.Errorf("garbage: %q", got)
	}
}

// FuzzDecodeErr: any error text from a peer decodes without panicking; a
// text that carries a kernel panic gives one whose fields are strings of
// the text, and the error's own text never holds the marker.
func FuzzDecodeErr(f *testing.F) {
	kp := &plugin.KernelPanic{Kernel: "k", Value: "v", At: "k.go:3", Stack: "main.k()\n"}
	f.Add(uint8(0), StatusOf(fmt.Errorf("device 1: %w", kp)).Text)
	f.Add(uint8(1), "plain text")
	f.Add(uint8(2), "x"+panicMark+"{\"kernel\":")
	f.Add(uint8(3), panicMark+panicMark+"{}")
	f.Fuzz(func(t *testing.T, code uint8, text string) {
		err := decodeErr(code, text)
		if err == nil {
			return
		}
		if strings.Contains(err.Error(), panicMark) {
			t.Fatalf("decoded text %q keeps the marker", err.Error())
		}
		var back *plugin.KernelPanic
		// JSON decodes each byte that is not UTF-8 as U+FFFD: the kernel
		// is a string of the text as decoded so.
		if errors.As(err, &back) && back.Kernel != "" && !strings.Contains(utf8Decoded(text), strings.TrimSpace(back.Kernel)) && !strings.Contains(text, "\\") {
			t.Fatalf("kernel %q is not from the text %q", back.Kernel, text)
		}
	})
}

// utf8Decoded is s with each byte that does not begin a UTF-8 encoding
// replaced by U+FFFD, as encoding/json decodes a string.
func utf8Decoded(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}
