// Generated device code (plugin.DeviceCode.Generated) is launched here. This
// is what the GPU kinds share of launching code that cmd/goffload-gen made
// from a kernel's Go body. The code is OpenCL C, or PTX that clang made of
// it.
//
// Its entry takes more parameters after the kernel's own. First comes each
// slice parameter's length (a 64-bit integer). Then come each declare target
// variable's device copy and length, and the device's number (ctx.Device()).
// Last is a fault record of FaultWords 64-bit words that a failed check
// writes. The first check to fail wins. The kind passes them. For code with
// checks, it reads the record when the launch is done.

package gpukind

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// FaultWords is the size of the fault record in 64-bit words.
const FaultWords = 4

// GenCode is generated code as a device launches it.
type GenCode struct {
	Sites   []string          // the code's Go checks ("main.go:12: index")
	Globals []*entries.Global // the declare target variables it uses
	Dev     int               // the device's number
	// Lang names the code in errors: "generated OpenCL C".
	Lang string
}

// NewGenCode returns code, generated code for a device numbered dev, as the
// device launches it. Its error names a declare target variable that the
// program does not declare.
func NewGenCode(code plugin.DeviceCode, dev int, lang string) (*GenCode, error) {
	all, _ := entries.Globals()
	g := &GenCode{Sites: code.Sites, Dev: dev, Lang: lang}
	for _, n := range code.Globals {
		i := slices.IndexFunc(all, func(v *entries.Global) bool { return v.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("its %s uses declare target variable %q, which the program does not declare", lang, n)
		}
		g.Globals = append(g.Globals, all[i])
	}
	return g, nil
}

// Hidden is how many parameters the entry of g takes after k's. They are the
// slice lengths, two for each variable, the device number and the fault
// record.
func (g *GenCode) Hidden(k plugin.Kernel) int {
	n := 2 + 2*len(g.Globals)
	for _, p := range k.Params() {
		if p.Kind == plugin.Slice {
			n++
		}
	}
	return n
}

// SliceLens are the lengths of args' slices, in order, for generated code.
func SliceLens(k plugin.Kernel, args []plugin.Arg) []int64 {
	var lens []int64
	for i, p := range k.Params() {
		if p.Kind == plugin.Slice {
			lens = append(lens, int64(args[i].Len))
		}
	}
	return lens
}

// Fault reads fault record rec (little-endian words, as a GPU writes them).
// It returns nil if no check failed. Else it returns kernel k's panic as its
// Go body would have had it. That is the Go file and line of the check, and
// the value Go's panic would have had.
func (g *GenCode) Fault(k plugin.Kernel, rec []byte) *plugin.KernelPanic {
	var w [FaultWords]int64
	for i := range w {
		w[i] = int64(binary.LittleEndian.Uint64(rec[8*i:]))
	}
	if w[0] == 0 {
		return nil
	}
	site := "?: ?"
	if w[0] >= 1 && w[0] <= int64(len(g.Sites)) {
		site = g.Sites[w[0]-1]
	}
	at, what, _ := strings.Cut(site, ": ")
	var v string
	switch what {
	case "index":
		v = fmt.Sprintf("runtime error: index out of range [%d] with length %d", w[1], w[2])
	case "divide":
		v = "runtime error: integer divide by zero"
	case "slice high":
		v = fmt.Sprintf("runtime error: slice bounds out of range [:%d] with capacity %d", w[1], w[2])
	case "slice low":
		v = fmt.Sprintf("runtime error: slice bounds out of range [%d:%d]", w[1], w[2])
	case "shift":
		v = "runtime error: negative shift amount"
	case "panic":
		v = "panic (its value is not evaluated on a device that runs " + g.Lang + ")"
	default:
		v = fmt.Sprintf("check %q failed (%d, %d)", what, w[1], w[2])
	}
	e := plugin.NewKernelPanic(k.Name(), v, false, w[3]&1 != 0, nil)
	e.At = at
	e.Stack = at + " (" + g.Lang + ": no stack)\n"
	return e
}

// Declare target variables in generated code (plugin.DeviceCode.Globals) are
// kept here. A GPU kind runs no bind kernel (Kernel.Bind). So the kind keeps
// what the binds it is given say, by variable. It passes each variable's
// device copy and length to the code that uses it.

// GlobalBind is where a declare target variable's copy is on the device.
type GlobalBind struct {
	gen  uint64
	Ptr  plugin.Ptr
	Size int64 // bytes; 0: unbound (a link variable not mapped)
}

// Globals are a device's bindings of declare target variables, by
// variable index. The zero Globals is ready for use.
type Globals struct {
	mu sync.Mutex
	m  map[int]GlobalBind
}

// Bind records a launch of the bind kernel (entries.BindArgs's arguments). Of
// two binds, the later one wins.
func (gs *Globals) Bind(args []plugin.Arg) {
	if len(args) != 5 {
		return
	}
	op, _ := args[0].Scalar.(int)
	idx, _ := args[1].Scalar.(int)
	gen, _ := args[2].Scalar.(uint64)
	b := GlobalBind{gen: gen}
	if op == entries.BindOp {
		b.Ptr, b.Size = args[4].Ptr, int64(args[4].Len)
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.m == nil {
		gs.m = map[int]GlobalBind{}
	}
	if cur, ok := gs.m[idx]; ok && cur.gen > gen {
		return
	}
	gs.m[idx] = b
}

// Lookup returns where variable g's copy is, for a launch of k. If g has none
// on the device, it returns an error wrapping plugin.ErrKernelFailed.
func (gs *Globals) Lookup(k plugin.Kernel, g *entries.Global) (GlobalBind, error) {
	gs.mu.Lock()
	b := gs.m[g.Index]
	gs.mu.Unlock()
	if b.Size == 0 {
		return b, fmt.Errorf("%w: kernel %q: declare target %s is not mapped on the device: map its host slice there (EnterData, Data or a map clause) before the kernel runs", plugin.ErrKernelFailed, k.Name(), g.Describe())
	}
	return b, nil
}
