// Package ptxgen checks, in tests, that a committed PTX file is what the
// generate directive beside it makes of its CUDA C source: the line
//
//	//go:generate clang -x cuda --cuda-device-only … -S saxpy.cu -o saxpy.ptx
//
// is run again with the output in a temporary file, and the two compared.
package ptxgen

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// clangs are the compilers tried for a go:generate line's clang, in order
// (Debian's LLVM packages install clang-N).
var clangs = []string{"clang", "clang-22", "clang-21", "clang-20", "clang-19", "clang-18"}

// UpToDate runs every "//go:generate clang" line of goFile (relative to
// the test's directory) in goFile's directory, writing each -o file to a
// temporary directory, and fails t if it differs from the committed file.
// It skips t where no clang with the NVPTX target is installed, and fails
// it if goFile has no such line.
func UpToDate(t testing.TB, goFile string) {
	t.Helper()
	lines, err := generateLines(goFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 {
		t.Fatalf("%s has no //go:generate clang line", goFile)
	}
	clang := ""
	for _, c := range clangs {
		if p, err := exec.LookPath(c); err == nil {
			clang = p
			break
		}
	}
	if clang == "" {
		t.Skip("no clang to generate the PTX with")
	}
	dir := filepath.Dir(goFile)
	for _, args := range lines {
		o := -1
		for i, a := range args {
			if a == "-o" && i+1 < len(args) {
				o = i + 1
			}
		}
		if o < 0 {
			t.Fatalf("%s: a go:generate line without -o: %s", goFile, strings.Join(args, " "))
		}
		want := filepath.Join(dir, args[o])
		out := filepath.Join(t.TempDir(), filepath.Base(args[o]))
		args = append([]string(nil), args...)
		args[o] = out
		cmd := exec.Command(clang, args...)
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("%s cannot generate PTX here: %v\n%s", clang, err, b)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, committed) {
			t.Errorf("%s differs from what %s makes of it (%s): run go generate in %s and commit it", want, clang, strings.Join(args, " "), dir)
		}
	}
}

// generateLines returns the arguments of goFile's "//go:generate clang"
// lines (after clang; our lines use no quoting).
func generateLines(goFile string) ([][]string, error) {
	f, err := os.Open(goFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 1 && fields[0] == "//go:generate" && fields[1] == "clang" {
			lines = append(lines, fields[2:])
		}
	}
	return lines, sc.Err()
}
