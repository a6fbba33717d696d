package opencl

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unsafe"

	"github.com/goffload/offload/internal/cldrv"
)

// These are the sizes of the types that an entry's parameters name and the
// kind does not know: structs, unions and typedefs. The argument info names a
// parameter's type ("P5*") but not its size. So a slice of 48-byte Go structs
// passed to a pointer to 40-byte OpenCL C structs would run on misread
// memory. The kind builds the program's source once more with a probe kernel
// that writes sizeof of each such type. It runs it once. It checks each
// slice's element size (and each value's size) against it (checkEntry).

// probeName is the probe kernel's entry.
const probeName = "goffload_sizeof_probe"

// typeName is a type name a probe can take sizeof of: an identifier, or
// struct, union or enum and one.
var typeName = regexp.MustCompile(`^((struct|union|enum) )?[A-Za-z_][A-Za-z0-9_]*$`)

// elemType is the type an entry's parameter of type name cl points to, or is.
// It is "P5" for "P5*", without qualifiers.
func elemType(cl string) string {
	cl = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(cl), "*"))
	for _, q := range []string{"const ", "volatile ", "restrict "} {
		cl = strings.TrimPrefix(cl, q)
	}
	return strings.TrimSpace(cl)
}

// typeSizes returns the sizes in bytes of the types that the parameters of
// p's kernels name and clType does not know. They are by name (elemType). It
// probes them once per program. A type it could not probe is absent, and goes
// unchecked; the probe did not build or run.
func (d *device) typeSizes(p *program, src []byte) map[string]int {
	p.sizesOnce.Do(func() {
		names := d.unknownTypes(p)
		if len(names) == 0 {
			return
		}
		sizes, err := d.probe(src, p.opts, names)
		if err != nil {
			return // unchecked: the entry's other checks still apply
		}
		p.sizes = sizes
	})
	return p.sizes
}

// unknownTypes lists the type names of p's kernels' parameters that clType
// does not know and a probe can take sizeof of.
func (d *device) unknownTypes(p *program) []string {
	seen := map[string]bool{}
	for _, entry := range p.entries {
		k, err := d.lib.CreateKernel(p.pr, entry)
		if err != nil {
			continue
		}
		n, _ := d.lib.KernelNumArgs(k)
		for i := range n {
			cl, err := d.lib.KernelArgString(k, i, cldrv.KernelArgTypeName)
			if err != nil {
				break // no argument info
			}
			t := elemType(cl)
			if _, _, known := clType(t); !known && typeName.MatchString(t) {
				seen[t] = true
			}
		}
		d.lib.ReleaseKernel(k)
	}
	names := make([]string, 0, len(seen))
	for t := range seen {
		names = append(names, t)
	}
	sort.Strings(names)
	return names
}

// probe builds src with a kernel that writes sizeof of each of names. It runs
// it once on a queue of its own, and returns the sizes.
func (d *device) probe(src []byte, opts string, names []string) (map[string]int, error) {
	var b strings.Builder
	b.Write(src)
	fmt.Fprintf(&b, "\n__kernel void %s(__global ulong *goffload_out) {\n", probeName)
	for i, t := range names {
		fmt.Fprintf(&b, "\tgoffload_out[%d] = sizeof(%s);\n", i, t)
	}
	b.WriteString("}\n")
	lib := d.lib
	pr, err := lib.CreateProgram(d.ctx, []byte(b.String()))
	if err != nil {
		return nil, err
	}
	defer lib.ReleaseProgram(pr)
	if err := lib.BuildProgram(pr, []cldrv.Device{d.cd.id}, opts); err != nil {
		return nil, err
	}
	k, err := lib.CreateKernel(pr, probeName)
	if err != nil {
		return nil, err
	}
	defer lib.ReleaseKernel(k)
	q, err := lib.CreateQueue(d.ctx, d.cd.id, false, d.props)
	if err != nil {
		return nil, err
	}
	defer lib.ReleaseQueue(q)
	out := make([]uint64, len(names))
	buf, err := lib.CreateBuffer(d.ctx, int64(8*len(out)))
	if err != nil {
		return nil, err
	}
	defer lib.ReleaseMem(buf)
	if err := lib.SetKernelArg(k, 0, unsafe.Sizeof(buf), unsafe.Pointer(&buf)); err != nil {
		return nil, err
	}
	one := [3]uintptr{1, 1, 1}
	if err := lib.EnqueueKernel(q, k, 1, &one, nil, nil, nil); err != nil {
		return nil, err
	}
	if err := lib.ReadBuffer(q, buf, true, 0, int64(8*len(out)), unsafe.Pointer(&out[0]), nil, nil); err != nil {
		return nil, err
	}
	sizes := make(map[string]int, len(names))
	for i, t := range names {
		sizes[t] = int(out[i])
	}
	return sizes, nil
}
