package gpukind

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/goffload/offload/plugin"
)

// Plural is n and what, in the plural unless n is 1: "1 byte", "8 bytes".
func Plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// GoType names a kernel parameter's Go type as the program wrote it. For a
// slice it is the slice's own type (offload.In[float32]). Else it is the
// element's or the scalar's.
func GoType(p plugin.Param) string {
	switch {
	case p.Kind == plugin.Slice && p.SliceType != nil:
		return p.SliceType.String()
	case p.Kind == plugin.Slice && p.Type != nil:
		return "[]" + p.Type.String()
	case p.Type != nil:
		return p.Type.String()
	}
	return "?"
}

// GoParam names k's parameter i for messages: "2 (offload.In[float32])". For
// a field of a struct parameter it is "3 (field Scale float32 of parameter 1,
// a main.args)".
func GoParam(k plugin.Kernel, i int) string {
	p := k.Params()[i]
	if p.Field >= 0 {
		if t := p.Struct; t != nil && t.Kind() == reflect.Struct && p.Field < t.NumField() {
			return fmt.Sprintf("%d (field %s %s of parameter %d, a %s)", i, t.Field(p.Field).Name, GoType(p), p.Top, t)
		}
	}
	return fmt.Sprintf("%d (%s)", i, GoType(p))
}

// A Dialect names a device language's types. It is for the messages that say
// how device code declares a parameter that takes a Go parameter.
type Dialect struct {
	// Types are the language's types for Go's basic kinds.
	Types map[reflect.Kind]string
	// Pointer is how the language declares a pointer to elements of type
	// elem, one of Types' values. elem is "" for elements of any other type
	// ("a pointer to structs"). Decl follows those with their size.
	Pointer func(elem string) string
}

// Decl says how device code declares a parameter that takes p.
func (l Dialect) Decl(p plugin.Param) string {
	if p.Type == nil {
		return "as the Go parameter"
	}
	t := p.Type
	if p.Kind == plugin.Slice {
		c, ok := l.Types[t.Kind()]
		if !ok {
			return fmt.Sprintf("%s of the same fields (%s, aligned %d)", l.Pointer(""), Plural(int(t.Size()), "byte"), t.Align())
		}
		return l.Pointer(c)
	}
	if c, ok := l.Types[t.Kind()]; ok {
		return c
	}
	if t.Kind() == reflect.Array {
		if c, ok := l.Types[t.Elem().Kind()]; ok {
			return fmt.Sprintf("a struct holding %s[%d]", c, t.Len())
		}
	}
	return fmt.Sprintf("a struct of the same fields (%s, aligned %d)", Plural(int(t.Size()), "byte"), t.Align())
}
