// Command goffload-gen translates a package's Go kernels to OpenCL C, so
// that OpenCL devices run them, and to PTX, so that CUDA GPUs do: go
// generate runs it in the package, from one line beside the kernels,
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
// PTX comes from clang's NVPTX target (no CUDA toolkit is needed): -ptx
// auto, the default, uses the clang that made the file's PTX before, else
// the first of clang, clang-22 … clang-14 that has the target. Without one
// it keeps the file's PTX where the kernels did not change, and otherwise
// writes OpenCL C only and says so. -ptx off writes no PTX; -ptx CLANG
// uses that clang. A kernel that calls a math function NVPTX has no
// instruction for (math.Exp, math.Sin, …) gets OpenCL C only, and is
// listed.
//
// Usage:
//
//	goffload-gen [-o file] [-strict] [-unchecked] [-ptx auto|off|CLANG] [dir]
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
	ptx := flag.String("ptx", "auto", "PTX for the cuda kind: auto (a clang with the NVPTX target if there is one), off, or the clang to use")
	flag.Parse()
	dir := "."
	if flag.NArg() > 0 {
		dir = flag.Arg(0)
	}
	os.Exit(run(dir, *out, *ptx, *strict, *unchecked, *verbose))
}

func run(dir, out, ptx string, strict, unchecked, verbose bool) int {
	path := filepath.Join(dir, out)
	opt := kernelgen.Options{Output: out, Unchecked: unchecked}
	switch ptx {
	case "off":
		opt.NoPTX = true
	case "auto":
		opt.Clang, _ = kernelgen.FindClang(nil, kernelgen.ClangOf(path))
	default:
		c, err := kernelgen.NewClang(ptx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "goffload-gen: -ptx:", err)
			return 2
		}
		opt.Clang = c
	}
	res, err := kernelgen.Generate(dir, opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "goffload-gen:", err)
		return 2
	}
	for _, r := range res.Refused {
		fmt.Fprintln(os.Stderr, "goffload-gen:", r)
	}
	if res.PTX != nil {
		for _, r := range res.NoPTX {
			fmt.Fprintln(os.Stderr, "goffload-gen:", r)
		}
	}
	if res.PTXNote != "" && (res.PTX == nil || verbose) {
		fmt.Fprintln(os.Stderr, "goffload-gen:", res.PTXNote)
	}
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
