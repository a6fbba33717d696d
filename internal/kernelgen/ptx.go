package kernelgen

// PTX for the cuda kind: the OpenCL C of the kernels compiled by clang's
// NVPTX target (clang -x cl -target nvptx64-nvidia-cuda), after a prelude
// that gives the OpenCL C builtins the code uses from PTX's special
// registers and instructions, since there is no libclc for NVPTX. The
// entries take the parameters the OpenCL C entries take (the hidden ones
// included), so both kinds pass the same. A kernel that calls a math
// function with no NVPTX instruction (math.Exp, math.Sin, …: CUDA's
// libdevice has them, and clang finds no libdevice without a CUDA
// toolkit) has OpenCL C only.
//
// PTX depends on the clang that made it, so the generated file records
// the clang's version and the SHA-256 of the source: goffload-gen keeps
// the PTX where no clang is given and the source is unchanged, and the
// tests regenerate it where the same clang is installed.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// ptxMath are the C math functions of generated code that NVPTX has
// instructions for (the others need libdevice).
var ptxMath = map[string]bool{
	"sqrt": true, "fabs": true, "floor": true, "ceil": true, "trunc": true, "round": true, "rint": true,
	"fma": true, "copysign": true,
}

// ptxPrelude gives the generated code's OpenCL C builtins for clang's
// NVPTX target, which has no OpenCL library (-cl-no-stdinc).
const ptxPrelude = `
// The OpenCL C builtins this code uses, for clang's NVPTX target (no
// libclc): work-item functions from PTX's special registers, math from
// its instructions (correctly rounded: sqrt.rn, div.rn), atomics.
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef unsigned long size_t;
#define INFINITY __builtin_inff()
#define GO_OVL __attribute__((overloadable, always_inline)) static inline
static inline size_t get_global_id(uint d) { return (size_t)__nvvm_read_ptx_sreg_ctaid_x() * (size_t)__nvvm_read_ptx_sreg_ntid_x() + (size_t)__nvvm_read_ptx_sreg_tid_x(); }
static inline size_t get_global_size(uint d) { return (size_t)__nvvm_read_ptx_sreg_nctaid_x() * (size_t)__nvvm_read_ptx_sreg_ntid_x(); }
static inline int atomic_cmpxchg(volatile global int *p, int cmp, int val) { return __sync_val_compare_and_swap(p, cmp, val); }
#define as_double(x) __builtin_astype((x), double)
#define as_float(x) __builtin_astype((x), float)
#define as_ulong(x) __builtin_astype((x), ulong)
#define as_uint(x) __builtin_astype((x), uint)
#define isnan(x) __builtin_isnan(x)
#define isinf(x) __builtin_isinf(x)
#define signbit(x) __builtin_signbit(x)
GO_OVL float sqrt(float x) { return __builtin_sqrtf(x); }
GO_OVL double sqrt(double x) { return __builtin_sqrt(x); }
GO_OVL float fabs(float x) { return __builtin_fabsf(x); }
GO_OVL double fabs(double x) { return __builtin_fabs(x); }
GO_OVL double floor(double x) { return __builtin_floor(x); }
GO_OVL double ceil(double x) { return __builtin_ceil(x); }
GO_OVL double trunc(double x) { return __builtin_trunc(x); }
GO_OVL double round(double x) { return __builtin_round(x); }
GO_OVL double rint(double x) { return __builtin_rint(x); }
GO_OVL double fma(double x, double y, double z) { return __builtin_fma(x, y, z); }
GO_OVL double copysign(double x, double y) { return __builtin_copysign(x, y); }
#define GO_MINMAX(T) GO_OVL T min(T a, T b) { return a < b ? a : b; } GO_OVL T max(T a, T b) { return a > b ? a : b; }
GO_MINMAX(char) GO_MINMAX(uchar) GO_MINMAX(short) GO_MINMAX(ushort) GO_MINMAX(int) GO_MINMAX(uint) GO_MINMAX(long) GO_MINMAX(ulong)
`

// PTXArch is the GPU architecture the PTX is made for: every NVIDIA GPU
// since Maxwell JIT-compiles it.
const PTXArch = "sm_50"

// clangArgs are clang's arguments after the program: OpenCL C from
// standard input to PTX on standard output, with no floating-point
// contraction (Go fuses nothing on amd64).
var clangArgs = []string{"-x", "cl", "-cl-std=CL1.2", "-cl-no-stdinc", "-target", "nvptx64-nvidia-cuda",
	"-march=" + PTXArch, "-O3", "-ffp-contract=off", "-Wno-everything", "-S", "-o", "-", "-"}

// Clang is a clang with the NVPTX target.
type Clang struct {
	Path    string
	Version string // the first line of clang --version
}

// Clangs are the names FindClang tries, in order, after the one the
// existing file's PTX was made with (Debian's LLVM packages install
// clang-N).
var Clangs = []string{"clang", "clang-22", "clang-21", "clang-20", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14"}

// FindClang returns the first clang of names (Clangs if nil) with the
// NVPTX target, preferring one whose version is prefer (a Version); an
// error if there is none.
func FindClang(names []string, prefer string) (*Clang, error) {
	if names == nil {
		names = Clangs
	}
	var found []*Clang
	for _, n := range names {
		c, err := NewClang(n)
		if err != nil {
			continue
		}
		if prefer == "" || c.Version == prefer {
			return c, nil
		}
		found = append(found, c)
	}
	if len(found) > 0 {
		return found[0], nil
	}
	return nil, fmt.Errorf("no clang with the NVPTX target (tried %s; Debian: apt-get install clang-14)", strings.Join(names, ", "))
}

// NewClang returns the clang named name (a path or a command), or an
// error if it is not there or has no NVPTX target.
func NewClang(name string) (*Clang, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(p, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", p, err)
	}
	version, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	targets, err := exec.Command(p, "-print-targets").Output()
	if err != nil || !bytes.Contains(targets, []byte("nvptx64")) {
		return nil, fmt.Errorf("%s (%s) has no NVPTX target", p, version)
	}
	return &Clang{Path: p, Version: version}, nil
}

// Compile compiles src, generated C with the PTX prelude, to PTX.
func (c *Clang) Compile(src string) ([]byte, error) {
	cmd := exec.Command(c.Path, clangArgs...)
	cmd.Stdin = strings.NewReader(src)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s (%s) %s: %w\n%s", c.Path, c.Version, strings.Join(clangArgs, " "), err, stderr.String())
	}
	if i := bytes.Index(out, []byte(".extern .func")); i >= 0 {
		line, _, _ := bytes.Cut(out[i:], []byte("\n"))
		return nil, fmt.Errorf("%s made PTX that calls a function it does not define (%s)", c.Version, line)
	}
	return out, nil
}

// ptxFromPrefix begins the generated file's comment that says what made
// its PTX.
const ptxFromPrefix = "goffload-gen PTX: "

// from says what made PTX of source with clang version: the record the
// generated file keeps.
func from(version, source string) string {
	sum := sha256.Sum256([]byte(source))
	return fmt.Sprintf("clang=%q arch=%s source-sha256=%s", version, PTXArch, hex.EncodeToString(sum[:]))
}

var fromRE = regexp.MustCompile(`// ` + ptxFromPrefix + `(clang=("(?:[^"\\]|\\.)*") arch=\S+ source-sha256=[0-9a-f]+)\.\n`)

// OldPTX returns the PTX of a generated file, and what made it (""
// where it has none).
func OldPTX(file []byte) (ptx []byte, from, version string) {
	m := fromRE.FindSubmatch(file)
	if m == nil {
		return nil, "", ""
	}
	version, err := strconv.Unquote(string(m[2]))
	if err != nil {
		return nil, "", ""
	}
	f, err := parser.ParseFile(token.NewFileSet(), "", file, 0)
	if err != nil {
		return nil, "", ""
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			if len(vs.Names) == 1 && vs.Names[0].Name == "zzOffloadPTX" && len(vs.Values) == 1 {
				if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
					if v, err := strconv.Unquote(lit.Value); err == nil {
						return []byte(v), string(m[1]), version
					}
				}
			}
		}
	}
	return nil, "", ""
}

// ClangOf returns the version of the clang that made the PTX of the
// generated file at path, "" if it has none.
func ClangOf(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	_, _, v := OldPTX(b)
	return v
}

// makePTX gives res its PTX: compiled by opt.Clang, else kept from the
// existing file in dir where it was made from the same source.
func (res *Result) makePTX(dir string, opt Options) error {
	if opt.Clang != nil {
		ptx, err := opt.Clang.Compile(res.PTXSource)
		if err != nil {
			return err
		}
		res.PTX, res.PTXFrom = ptx, from(opt.Clang.Version, res.PTXSource)
		res.PTXNote = "PTX made by " + opt.Clang.Version
		return nil
	}
	old, err := os.ReadFile(filepath.Join(dir, opt.Output))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ptx, was, version := OldPTX(old)
	switch {
	case ptx == nil:
		res.PTXNote = "no clang with the NVPTX target: no PTX (the cuda kind cannot run these kernels; install clang, Debian: apt-get install clang-14, and run go generate again)"
	case was != from(version, res.PTXSource):
		res.PTXNote = "no clang with the NVPTX target, and the kernels changed: their PTX (made by " + version + ") is dropped, and the cuda kind cannot run them (install clang, Debian: apt-get install clang-14, and run go generate again)"
	default:
		res.PTX, res.PTXFrom = ptx, was
		res.PTXNote = "PTX kept: made by " + version + " of the same source"
	}
	return nil
}

// noPTXAt notes that the code being translated cannot have PTX, at n.
func (g *gen) noPTXAt(n ast.Node, format string, args ...any) {
	pos := g.p.fset.Position(n.Pos())
	g.markNoPTX(fmt.Sprintf("%s:%d: %s", filepath.Base(pos.Filename), pos.Line, fmt.Sprintf(format, args...)))
}

// markNoPTX notes why, if not "", as why the code being translated
// cannot have PTX (the first reason stays).
func (g *gen) markNoPTX(why string) {
	if g.noPTX == "" {
		g.noPTX = why
	}
}
