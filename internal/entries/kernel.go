// Package entries is the program's offload entries table, and the code
// that calls a kernel's Go body. The table holds the kernels and declare
// target variables that every process registers at package init, in the
// same order. It is sealed while a runtime runs. Calling a body means
// argument decoding, runner goroutines and panics.
//
// It is the runtime's side of what package plugin shows kinds. A kind sees
// a kernel as a read-only plugin.Kernel in a plugin.Image, and never calls
// this package. The root package registers entries here. The core seals
// the table at Start and binds the variables on each device.
package entries

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/goffload/offload/plugin"
)

// Kernel is an entry of the offload entries table: a Go function that
// every process of the program registers under the same name at the same
// index. It implements plugin.Kernel, the read-only handle kinds get; the
// runtime core uses the rest of its methods.
type Kernel struct {
	// long says the kernel's last run on a runner lasted lingerAfter or
	// more: its next caller polls for the answer (onRunner).
	long   atomic.Bool
	index  int
	name   string
	fn     reflect.Value
	hasCtx bool // the first parameter is the kernel context
	// wrapCtx says the body gets its context as the front end's (see
	// SetContext), not as the kind's *plugin.KernelCtx.
	wrapCtx bool
	params  []plugin.Param // parameters after the context, struct fields flattened
	// tops are the function's parameter types after the context; a struct
	// parameter holding slices is in params as its fields.
	tops []reflect.Type
	// structs says some parameter is a struct holding slices.
	structs bool
	// direct, if set, calls the body without reflection (see DirectFunc);
	// set at registration, before any launch.
	direct DirectFunc
	// code is the kernel's device code for kinds that cannot run Go (a
	// GPU), by format ("ptx"); set at registration, before Start.
	code map[string]plugin.DeviceCode
	// sig is the function's signature as text, part of the image digest.
	sig string
	// opName is the name of a target construct that launches the kernel.
	opName string
}

var _ plugin.Kernel = (*Kernel)(nil)

// Index is the kernel's place in the table.
func (k *Kernel) Index() int { return k.index }

// Name is the name the kernel was registered under.
func (k *Kernel) Name() string { return k.name }

// OpName is the name of a target construct that launches k ("target " and
// k's name), made once.
func (k *Kernel) OpName() string {
	if k.opName == "" {
		return "target " + k.name
	}
	return k.opName
}

// Params are the parameters after the context, struct fields flattened.
func (k *Kernel) Params() []plugin.Param { return k.params }

// Code returns the kernel's device code for format.
func (k *Kernel) Code(format string) (plugin.DeviceCode, bool) {
	c, ok := k.code[format]
	return c, ok
}

// Tops are the function's parameter types after the context (a struct
// parameter holding slices is one of them, and several Params).
func (k *Kernel) Tops() []reflect.Type { return k.tops }

// HasCtx says the function's first parameter is the kernel context.
func (k *Kernel) HasCtx() bool { return k.hasCtx }

// SetDirect gives k a DirectFunc that calls its body without reflection; it
// is meant for registration (the typed kernels of package offload), before
// any launch.
func (k *Kernel) SetDirect(f DirectFunc) { k.direct = f }

// SetCode gives k device code for format. It is meant for package init,
// like registration: the table is sealed while a runtime is started, and
// an error wrapping ErrSealed is returned then.
func (k *Kernel) SetCode(c plugin.DeviceCode) error {
	registry.Lock()
	defer registry.Unlock()
	if err := checkUnsealed(fmt.Sprintf("device code for kernel %q", k.name)); err != nil {
		return err
	}
	if c.Format == "" || len(c.Image) == 0 || c.Entry == "" {
		return fmt.Errorf("%w: kernel %q: device code needs a format, an image and an entry name", ErrKernelSignature, k.name)
	}
	if k.code == nil {
		k.code = map[string]plugin.DeviceCode{}
	}
	k.code[c.Format] = c
	return nil
}

// ErrKernelSignature is wrapped by every error about a kernel's signature or name.
var ErrKernelSignature = errors.New("invalid kernel")

var ctxType = reflect.TypeFor[*plugin.KernelCtx]()

// frontCtx is the context type of the program's front end (package
// offload's), set once at its init by SetContext; zero: none.
var frontCtx struct {
	typ  reflect.Type
	wrap func(*plugin.KernelCtx) reflect.Value
}

// SetContext makes bodies whose context parameter t implements get
// wrap(ctx) instead of the kind's *plugin.KernelCtx. Package offload calls
// it from its init, before any package that imports it registers kernels.
// So its kernels get a context of its own type. Kernels whose context
// parameter only *plugin.KernelCtx implements still get that.
func SetContext(t reflect.Type, wrap func(*plugin.KernelCtx) reflect.Value) {
	frontCtx.typ, frontCtx.wrap = t, wrap
}

// ctxValue is the value of k's context parameter for a launch with ctx.
func (k *Kernel) ctxValue(ctx *plugin.KernelCtx) reflect.Value {
	if k.wrapCtx {
		return frontCtx.wrap(ctx)
	}
	return reflect.ValueOf(ctx)
}

var registry struct {
	sync.Mutex
	kernels []*Kernel
	byName  map[string]*Kernel
	// sealed counts the runtimes started and not stopped: the table they
	// loaded on their devices must not change under them.
	sealed int
	// sealedBy names what sealed the table, for the error.
	sealedBy string
}

// ErrSealed is wrapped by the error of a registration made while a runtime
// is started. The runtime's devices loaded the table as it was at Start;
// device processes register the kernels of their own package init. So a
// later entry could not run on them.
var ErrSealed = errors.New("registered after offload.Start")

// Seal takes the entries table for a runtime that starts now: until
// Unseal, registrations are refused with an error wrapping ErrSealed and
// ErrKernelSignature.
func Seal() *plugin.Image {
	registry.Lock()
	registry.sealed++
	registry.Unlock()
	return Current()
}

// Unseal ends one Seal.
func Unseal() {
	registry.Lock()
	if registry.sealed > 0 {
		registry.sealed--
	}
	registry.Unlock()
}

// CheckUnsealed returns an error wrapping ErrSealed if a runtime is started;
// what names the entry being registered (e.g. `kernel "saxpy"`).
func CheckUnsealed(what string) error {
	registry.Lock()
	defer registry.Unlock()
	return checkUnsealed(what)
}

func checkUnsealed(what string) error {
	if registry.sealed == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s %w: the devices loaded the kernel table at Start (device processes build theirs at their own package init), so it would not run there; register it at package init, in a package-level var, before Start", ErrKernelSignature, what, ErrSealed)
}

// RegisterKernel adds fn to the entries table under name. The first
// parameter may be an interface that *KernelCtx implements: the kernel
// context. Every other parameter must be a plain-data scalar or a slice of
// one. A plain-data scalar is a bool, integer, float or complex, or an
// array or struct made only of those. fn must return nothing.
func RegisterKernel(name string, fn any) (*Kernel, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: kernel name is empty", ErrKernelSignature)
	}
	v := reflect.ValueOf(fn)
	if !v.IsValid() || v.Kind() != reflect.Func || v.IsNil() {
		return nil, fmt.Errorf("%w: kernel %q: body is %T, want a non-nil func", ErrKernelSignature, name, fn)
	}
	t := v.Type()
	if t.IsVariadic() {
		return nil, fmt.Errorf("%w: kernel %q: variadic functions are not kernels", ErrKernelSignature, name)
	}
	if t.NumOut() != 0 {
		return nil, fmt.Errorf("%w: kernel %q: returns %d results; kernels return nothing (write results to a slice)", ErrKernelSignature, name, t.NumOut())
	}
	k := &Kernel{name: name, fn: v, sig: t.String(), opName: "target " + name}
	for i := 0; i < t.NumIn(); i++ {
		pt := t.In(i)
		if i == 0 && pt.Kind() == reflect.Interface && pt.NumMethod() > 0 {
			k.wrapCtx = frontCtx.typ != nil && frontCtx.typ.Implements(pt)
			if k.wrapCtx || ctxType.Implements(pt) {
				k.hasCtx = true
				continue
			}
		}
		top := len(k.tops)
		k.tops = append(k.tops, pt)
		if pt.Kind() == reflect.Slice {
			if err := plainData(pt.Elem()); err != nil {
				return nil, fmt.Errorf("%w: kernel %q: parameter %d (%s): slice elements must be plain data: %v", ErrKernelSignature, name, i, pt, err)
			}
			k.params = append(k.params, plugin.Param{Kind: plugin.Slice, Type: pt.Elem(), Top: top, Field: -1, SliceType: pt})
			continue
		}
		if pt.Kind() == reflect.Struct && plainData(pt) != nil && holdsSlices(pt) {
			fields, err := structFields(pt, top)
			if err != nil {
				return nil, fmt.Errorf("%w: kernel %q: parameter %d (%s): %v", ErrKernelSignature, name, i, pt, err)
			}
			k.params = append(k.params, fields...)
			k.structs = true
			continue
		}
		if err := plainData(pt); err != nil {
			return nil, fmt.Errorf("%w: kernel %q: parameter %d (%s): %v", ErrKernelSignature, name, i, pt, err)
		}
		k.params = append(k.params, plugin.Param{Kind: plugin.Scalar, Type: pt, Top: top, Field: -1})
	}
	registry.Lock()
	defer registry.Unlock()
	if err := checkUnsealed(fmt.Sprintf("kernel %q", name)); err != nil {
		return nil, err
	}
	if registry.byName == nil {
		registry.byName = map[string]*Kernel{}
	}
	if _, dup := registry.byName[name]; dup {
		return nil, fmt.Errorf("%w: kernel %q is registered twice", ErrKernelSignature, name)
	}
	k.index = len(registry.kernels)
	registry.kernels = append(registry.kernels, k)
	registry.byName[name] = k
	return k, nil
}

// holdsSlices reports whether struct type t has a slice field.
func holdsSlices(t reflect.Type) bool {
	for i := 0; i < t.NumField(); i++ {
		if t.Field(i).Type.Kind() == reflect.Slice {
			return true
		}
	}
	return false
}

// structFields flattens struct parameter t (parameter top) into its fields:
// each is plain data or a slice of plain data, and exported (the device
// side sets them).
func structFields(t reflect.Type, top int) ([]plugin.Param, error) {
	var out []plugin.Param
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		ft := f.Type
		if !f.IsExported() {
			return nil, fmt.Errorf("field %s is not exported: a struct that holds slices is rebuilt on the device field by field, so its fields must be exported", f.Name)
		}
		if ft.Kind() == reflect.Slice {
			if err := plainData(ft.Elem()); err != nil {
				return nil, fmt.Errorf("field %s (%s): slice elements must be plain data: %v", f.Name, ft, err)
			}
			out = append(out, plugin.Param{Kind: plugin.Slice, Type: ft.Elem(), Top: top, Field: i, SliceType: ft, Struct: t})
			continue
		}
		if err := plainData(ft); err != nil {
			return nil, fmt.Errorf("field %s (%s): %v (only one level of struct holding slices is attached: fields are plain data or slices of it; a pointer cannot be attached, use a slice)", f.Name, ft, err)
		}
		out = append(out, plugin.Param{Kind: plugin.Scalar, Type: ft, Top: top, Field: i, Struct: t})
	}
	return out, nil
}

// Assemble turns values of k's flattened parameters into the function's
// arguments: struct parameters are rebuilt from their fields, and slices
// take their parameter's own type.
func (k *Kernel) Assemble(vals []reflect.Value) []reflect.Value {
	if !k.structs {
		for i, p := range k.params {
			if p.Kind == plugin.Slice && p.SliceType != nil && vals[i].Type() != p.SliceType {
				vals[i] = vals[i].Convert(p.SliceType)
			}
		}
		return vals
	}
	out := make([]reflect.Value, len(k.tops))
	for i, p := range k.params {
		v := vals[i]
		if p.Kind == plugin.Slice && p.SliceType != nil && v.Type() != p.SliceType {
			v = v.Convert(p.SliceType)
		}
		if p.Field < 0 {
			out[p.Top] = v
			continue
		}
		if !out[p.Top].IsValid() {
			out[p.Top] = reflect.New(k.tops[p.Top]).Elem()
		}
		out[p.Top].Field(p.Field).Set(v)
	}
	return out
}

// PlainData reports why t is not plain data (nil if it is): the types that
// can be copied to a device as bytes.
func PlainData(t reflect.Type) error { return plainData(t) }

func plainData(t reflect.Type) error {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return nil
	case reflect.Array:
		if err := plainData(t.Elem()); err != nil {
			return fmt.Errorf("array of %s: %v", t.Elem(), err)
		}
		return nil
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if f.Type.Kind() == reflect.Slice {
				return fmt.Errorf("field %s is a slice (%s): %s is copied to a device as bytes, and a slice's elements are not in it; pass the struct itself as a kernel parameter (its slice fields become buffers of their own), or map the slice on its own", f.Name, f.Type, t)
			}
			if err := plainData(f.Type); err != nil {
				return fmt.Errorf("field %s: %v", f.Name, err)
			}
		}
		return nil
	case reflect.Slice:
		return fmt.Errorf("%s is a slice of slices; only one level of slice is a buffer", t)
	default:
		return fmt.Errorf("%s (kind %s) cannot be copied to a device (want bool, numbers, or arrays/structs of them)", t, t.Kind())
	}
}

// Current returns the entries table as registered so far, as kinds load it.
func Current() *plugin.Image {
	registry.Lock()
	ks := make([]plugin.Kernel, len(registry.kernels))
	for i, k := range registry.kernels {
		ks[i] = k
	}
	registry.Unlock()
	return &plugin.Image{Kernels: ks, Digest: Digest(ks)}
}

// Digest identifies a kernel table: a hash of the names and signatures in
// order.
func Digest(ks []plugin.Kernel) string {
	h := sha256.New()
	for _, pk := range ks {
		sig := ""
		if k, ok := pk.(*Kernel); ok {
			sig = k.sig
		}
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", pk.Index(), pk.Name(), sig)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// LookupKernel returns the registered kernel with the given name.
func LookupKernel(name string) (*Kernel, bool) {
	registry.Lock()
	defer registry.Unlock()
	k, ok := registry.byName[name]
	return k, ok
}

// KernelNames lists the registered kernel names, sorted.
func KernelNames() []string {
	registry.Lock()
	defer registry.Unlock()
	names := make([]string, 0, len(registry.kernels))
	for _, k := range registry.kernels {
		names = append(names, k.name)
	}
	sort.Strings(names)
	return names
}
