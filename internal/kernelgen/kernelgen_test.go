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

// TestGeneratedFilesUpToDate: the tree's committed zz_offload_gen.go files
// are what goffload-gen makes of their packages now (run go generate in a
// package whose file is stale), and every kernel there was translated.
func TestGeneratedFilesUpToDate(t *testing.T) {
	for _, c := range []struct {
		dir       string
		unchecked bool
	}{
		{"../../examples/saxpy", false},
		{"../../examples/pipeline", false},
		{"../../examples/apps/jacobi", false},
		{"../../examples/nbody", false},
		{"../../examples/apps/cg", false},
		{"../../examples/apps/cholesky", false},
		{"../../bench/internal/genk", false},
		{"../../bench/internal/genk/unchecked", true},
		{"../../examples/internal/gentest", false},
		{"../../examples/internal/gentest/fuzz", false},
		{"../../examples/internal/gentest/unchecked", true},
	} {
		res, err := Generate(c.dir, Options{Unchecked: c.unchecked})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Refused {
			t.Errorf("%s: refused: %v", c.dir, r)
		}
		old, err := os.ReadFile(c.dir + "/" + DefaultOutput)
		if err != nil {
			t.Fatal(err)
		}
		if string(old) != string(res.Go) {
			t.Errorf("%s/%s is stale: run go generate there", c.dir, DefaultOutput)
		}
	}
}
