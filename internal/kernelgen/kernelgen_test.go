package kernelgen

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestRefusals: every kernel outside the subset is refused with the file,
// line and construct that its want comment gives, and stays CPU-only; the
// package's other kernel is translated all the same.
func TestRefusals(t *testing.T) {
	const dir = "testdata/refuse"
	res, err := Generate(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dir + "/refuse.go")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[int]string{}
	re := regexp.MustCompile(`// want "(.*)"$`)
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			want[line] = m[1]
		}
	}
	got := map[int]string{}
	for _, r := range res.Refused {
		var line int
		if _, err := fmt.Sscanf(r.Error(), "refuse.go:%d:", &line); err != nil {
			t.Errorf("refusal without refuse.go:line: %v", r)
			continue
		}
		got[line] = r.Error()
	}
	for line, w := range want {
		g, ok := got[line]
		switch {
		case !ok:
			t.Errorf("refuse.go:%d: no refusal, want %q", line, w)
		case !strings.Contains(g, w):
			t.Errorf("refuse.go:%d: %s\n\twant %q", line, g, w)
		}
		delete(got, line)
	}
	for _, g := range got {
		t.Errorf("unexpected refusal: %s", g)
	}
	if len(res.Translated) != 1 || res.Translated[0] != "Fine" {
		t.Errorf("translated %v, want [Fine]", res.Translated)
	}
	if !strings.Contains(res.OpenCL, "kernel void fine(") || strings.Contains(res.OpenCL, "go_fn_fact") {
		t.Errorf("the OpenCL C has a refused kernel's code, or lacks fine's:\n%s", res.OpenCL)
	}
}

// generatedDirs are the tree's packages with generated files, and how
// their go:generate lines run goffload-gen.
var generatedDirs = []struct {
	dir       string
	unchecked bool
	noPTX     bool
}{
	{"../../examples/saxpy", false, false},
	{"../../examples/pipeline", false, false},
	{"../../examples/apps/jacobi", false, false},
	{"../../examples/nbody", false, false},
	{"../../examples/apps/cg", false, false},
	{"../../examples/apps/cholesky", false, false},
	{"../../bench/internal/genk", false, false},
	{"../../bench/internal/genk/unchecked", true, true},
	{"../../examples/internal/gentest", false, false},
	{"../../examples/internal/gentest/fuzz", false, true},
	{"../../examples/internal/gentest/unchecked", true, true},
}

// TestGeneratedFilesUpToDate: the tree's committed zz_offload_gen.go files
// are what goffload-gen makes of their packages now (run go generate in a
// package whose file is stale), and every kernel there was translated.
// Where the clang that made a file's PTX is installed (scripts/test
// installs clang-14) the PTX is compiled again and must be the committed
// bytes; without it the committed PTX is kept only where it was made from
// the same source, so a file whose kernels changed since is stale too.
// Each file's PTX entries take what their C entries do (checkPTXParams).
func TestGeneratedFilesUpToDate(t *testing.T) {
	compiled := 0
	for _, c := range generatedDirs {
		path := c.dir + "/" + DefaultOutput
		opt := Options{Unchecked: c.unchecked, NoPTX: c.noPTX}
		if v := ClangOf(path); v != "" {
			if clang, err := FindClang(nil, v); err == nil && clang.Version == v {
				opt.Clang = clang
				compiled++
			}
		}
		res, err := Generate(c.dir, opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Refused {
			t.Errorf("%s: refused: %v", c.dir, r)
		}
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(old) != string(res.Go) {
			t.Errorf("%s is stale: run go generate there", path)
		}
		if !c.noPTX {
			if res.PTX == nil {
				t.Errorf("%s: no PTX: %s", c.dir, res.PTXNote)
				continue
			}
			checkPTXParams(t, c.dir, res)
		}
	}
	if compiled == 0 {
		t.Log("the clang that made the committed PTX is not installed (Debian: apt-get install clang-14): the PTX was not compiled again")
	}
}
