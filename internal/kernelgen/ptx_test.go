package kernelgen

import (
	"os"
	"path/filepath"
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

// fakeClang writes a script that reads its input and prints out as the
// PTX, and returns it as a Clang.
func fakeClang(t *testing.T, out string) *Clang {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clang")
	script := "#!/bin/sh\ncat >/dev/null\ncat <<'EOF'\n" + out + "EOF\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Clang{Path: path, Version: "fake clang 1.0"}
}

// TestPTXKept: a kernel that calls (through a function) a math function
// NVPTX has no instruction for has OpenCL C only, listed with the line;
// the PTX source has the other kernel and its function only. The PTX
// clang makes is attached to the other kernel and recorded with the
// clang and the source's hash; without a clang the file's PTX is kept
// where the source is unchanged and dropped, saying so, where it changed;
// PTX calling a function it lacks is an error.
func TestPTXKept(t *testing.T) {
	const dir = "testdata/ptx"
	const out = "zz_ptx_test_gen.go"
	path := filepath.Join(dir, out)
	t.Cleanup(func() { os.Remove(path) })
	os.Remove(path)
	const image = ".version 4.0\n.target sm_50\n.address_size 64\n.visible .entry scale(.param .u64 a)\n{\n\tret;\n}\n"
	res, err := Generate(dir, Options{Output: out, Clang: fakeClang(t, image)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.NoPTX) != 1 || !strings.Contains(res.NoPTX[0], "ptx.go:14: math.Exp has no NVPTX instruction") || !strings.Contains(res.NoPTX[0], `kernel "growth"`) {
		t.Errorf("NoPTX %q: want growth's math.Exp at ptx.go:14", res.NoPTX)
	}
	if !strings.Contains(res.PTXSource, "kernel void scale(") || strings.Contains(res.PTXSource, "growth") || strings.Contains(res.PTXSource, "go_fn_grow") ||
		!strings.Contains(res.PTXSource, "go_fn_twice") || !strings.Contains(res.OpenCL, "kernel void growth(") {
		t.Errorf("the PTX source has growth's code, or lacks scale's:\n%s", res.PTXSource)
	}
	if string(res.PTX) != image {
		t.Errorf("PTX %q, want the fake clang's", res.PTX)
	}
	g := string(res.Go)
	if !strings.Contains(g, `Scale.Kernel().GeneratedPTX([]byte(zzOffloadPTX), "scale", zzOffloadSites)`) || strings.Contains(g, `Growth.Kernel().GeneratedPTX`) ||
		!strings.Contains(g, `clang="fake clang 1.0"`) {
		t.Errorf("the generated file does not attach the PTX to Scale alone, or does not say what made it:\n%s", g)
	}
	if err := os.WriteFile(path, res.Go, 0o666); err != nil {
		t.Fatal(err)
	}
	if v := ClangOf(path); v != "fake clang 1.0" {
		t.Errorf("ClangOf = %q", v)
	}
	kept, err := Generate(dir, Options{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if string(kept.Go) != g || !strings.Contains(kept.PTXNote, "kept") {
		t.Errorf("without a clang the unchanged PTX is not kept (%s)", kept.PTXNote)
	}
	changed := strings.Replace(g, "source-sha256=", "source-sha256=0", 1)
	if err := os.WriteFile(path, []byte(changed), 0o666); err != nil {
		t.Fatal(err)
	}
	dropped, err := Generate(dir, Options{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if dropped.PTX != nil || strings.Contains(string(dropped.Go), "GeneratedPTX") || !strings.Contains(dropped.PTXNote, "dropped") {
		t.Errorf("PTX of another source kept without a clang (%s)", dropped.PTXNote)
	}
	if _, err := fakeClang(t, ".extern .func (.param .b64 r) exp\n").Compile(res.PTXSource); err == nil || !strings.Contains(err.Error(), "does not define") {
		t.Errorf("PTX calling an undefined function: %v", err)
	}
}
