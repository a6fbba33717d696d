package kernelgen

import (
	"regexp"
	"strings"
	"testing"

	"github.com/goffload/offload/internal/ptx"
)

// entryRE matches an entry of generated C and its parameters.
var entryRE = regexp.MustCompile(`(?m)^kernel void (\w+)\((.*)\)$`)

// checkPTXParams checks that every entry of res's PTX takes the
// parameters of its generated C entry — the kernel's, then the hidden
// ones — at the sizes the cuda kind packs them (a pointer or a long 8
// bytes, …), read by internal/ptx as the kind reads them; that every
// kernel with PTX has its entry there; and that the PTX calls nothing it
// does not define.
func checkPTXParams(t *testing.T, dir string, res *Result) {
	t.Helper()
	sizes := map[string]int{"char": 1, "uchar": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4, "float": 4,
		"long": 8, "ulong": 8, "double": 8}
	entries, err := ptx.Entries(res.PTX)
	if err != nil {
		t.Errorf("%s: %v", dir, err)
		return
	}
	ms := entryRE.FindAllStringSubmatch(res.PTXSource, -1)
	if len(ms) == 0 || len(ms) != len(entries) {
		t.Errorf("%s: %d entries in the C, %d in the PTX", dir, len(ms), len(entries))
	}
	for _, m := range ms {
		name, params := m[1], strings.Split(m[2], ", ")
		got, ok := entries[name]
		if !ok {
			t.Errorf("%s: entry %s is not in the PTX", dir, name)
			continue
		}
		if len(got) != len(params) {
			t.Errorf("%s: entry %s: %d parameters in the PTX, %d in the C (%s)", dir, name, len(got), len(params), m[2])
			continue
		}
		for i, p := range params {
			f := strings.Fields(p)
			want, align := 0, 0
			switch {
			case f[0] == "global":
				want, align = 8, 8
			case sizes[f[0]] > 0:
				want, align = sizes[f[0]], sizes[f[0]]
			default: // a struct by value: an array of bytes
				if got[i].Count == 0 {
					t.Errorf("%s: entry %s parameter %d (%s) is %s, not a struct's bytes", dir, name, i, p, got[i].Decl)
				}
				continue
			}
			if got[i].Size != want || got[i].Align != align || got[i].Count != 0 {
				t.Errorf("%s: entry %s parameter %d (%s) is %s: want %d bytes aligned %d", dir, name, i, p, got[i].Decl, want, align)
			}
			if f[0] != "global" && (strings.Contains(f[0], "float") || f[0] == "double") != got[i].Float() {
				t.Errorf("%s: entry %s parameter %d (%s) is %s", dir, name, i, p, got[i].Decl)
			}
		}
	}
	if strings.Contains(string(res.PTX), ".extern") {
		t.Errorf("%s: the PTX calls a function it does not define", dir)
	}
}
