// Command goffload-gen translates a package's Go kernels to OpenCL C, so
// that OpenCL devices run them: go generate runs it in the package, from
// one line beside the kernels,
//
//	//go:generate go run github.com/goffload/offload/cmd/goffload-gen
//
// It reads the package with go/types, finds the package-level kernels
// (offload.MustKernelN and NewKernelN of a function literal or a
// package-level function), translates each whose body lies in the subset
// that docs/kernels.md lists, with Go's semantics and checks, and writes
// zz_offload_gen.go, which attaches the code to the kernels at package
// init. A kernel outside the subset is reported on standard error with the
// file, line and construct, and stays CPU-only; the command still succeeds
// (-strict makes it fail), since such a kernel is a program's right.
//
// Usage:
//
//	goffload-gen [-o file] [-strict] [-unchecked] [dir]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/goffload/offload/internal/kernelgen"
)

func main() {
	out := flag.String("o", kernelgen.DefaultOutput, "the generated file, in the package's directory")
	strict := flag.Bool("strict", false, "exit with status 1 if a kernel cannot be translated")
	unchecked := flag.Bool("unchecked", false, "leave out Go's bounds and division checks (for measuring their cost only)")
	verbose := flag.Bool("v", false, "list the kernels translated")
	flag.Parse()
	dir := "."
	if flag.NArg() > 0 {
		dir = flag.Arg(0)
	}
	os.Exit(run(dir, *out, *strict, *unchecked, *verbose))
}

func run(dir, out string, strict, unchecked, verbose bool) int {
	res, err := kernelgen.Generate(dir, kernelgen.Options{Output: out, Unchecked: unchecked})
	if err != nil {
		fmt.Fprintln(os.Stderr, "goffload-gen:", err)
		return 2
	}
	for _, r := range res.Refused {
		fmt.Fprintln(os.Stderr, "goffload-gen:", r)
	}
	path := filepath.Join(dir, out)
	if res.Go == nil {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			fmt.Fprintln(os.Stderr, "goffload-gen:", err)
			return 2
		}
	} else if old, err := os.ReadFile(path); err != nil || !bytes.Equal(old, res.Go) {
		if err := os.WriteFile(path, res.Go, 0o666); err != nil {
			fmt.Fprintln(os.Stderr, "goffload-gen:", err)
			return 2
		}
	}
	if verbose {
		for _, k := range res.Translated {
			fmt.Fprintln(os.Stderr, "goffload-gen: translated", k)
		}
	}
	if strict && len(res.Refused) > 0 {
		return 1
	}
	return 0
}
