package core

import (
	"errors"
	"strings"
	"testing"

	"github.com/goffload/offload/plugin"
)

// TestErrorfSaysPrefixOnce (issue 46): a runtime error that quotes another
// says "goffload: " once, at its start, and still wraps the quoted error
// and its causes; an error without the prefix is quoted as it is.
func TestErrorfSaysPrefixOnce(t *testing.T) {
	inner := &MapError{Device: "device 0 (host)", Op: "target", Clause: "map(present, to)", Name: "x", Err: ErrNotPresent}
	mid := Errorf("goffload: device 1 (host): task 3 failed: %w", inner)
	outer := Errorf("goffload: Any(): target k: %w (it failed first with: %w)", mid, plugin.ErrDeviceLost)
	for _, err := range []error{mid, outer} {
		if n := strings.Count(err.Error(), errPrefix); n != 1 || !strings.HasPrefix(err.Error(), errPrefix) {
			t.Errorf("%q: %d prefixes, want one, at the start", err, n)
		}
		var me *MapError
		if !errors.Is(err, ErrNotPresent) || !errors.As(err, &me) || me != inner {
			t.Errorf("%v: the quoted MapError and its cause are no longer wrapped", err)
		}
	}
	if !errors.Is(outer, plugin.ErrDeviceLost) || !strings.Contains(outer.Error(), "(it failed first with: device lost)") {
		t.Errorf("%v: a sentinel operand changed", outer)
	}
	if Quote(nil) != nil || Quote(ErrBadMap) != ErrBadMap {
		t.Error("Quote changed nil or an error without the prefix")
	}
}
