// Package ptx reads what goffload needs from PTX text, the assembly of
// NVIDIA GPUs a kernel's device code is given in: the .entry functions and
// their parameter lists — each parameter's size and alignment as the entry
// takes it — and the compute capability of the .target directive. It reads
// the module's declarations, not its instructions.
//
// The text comes from the user's program (an embedded .ptx file): any
// input gives a result or an error, never a panic. Like the CUDA driver,
// it reads the image up to its first NUL byte.
package ptx

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Param is a parameter of an .entry, as declared:
//
//	.param .u32 saxpy_param_0                 Size 4, Align 4
//	.param .u64 .ptr .align 1 saxpy_param_2   Size 8, Align 8, Ptr (the pointee aligned 1)
//	.param .align 8 .b8 agg_param_0[24]       Size 24, Align 8, Count 24 (a struct by value)
type Param struct {
	// Decl is the declaration with its spaces normalized, ".param" and
	// the name included.
	Decl string
	// Name is the parameter's name ("saxpy_param_0").
	Name string
	// Type is the declaration without ".param" and the name, an array's
	// bounds kept: ".u32", ".u64 .ptr .align 1", ".align 8 .b8[24]".
	Type string
	// Elem is the type of the parameter or of its elements: ".u32", ".b8".
	Elem string
	// Count is an array's number of elements (the product of its
	// bounds), 0 for a parameter that is not an array.
	Count int
	// Size and Align are the bytes the parameter takes and their
	// alignment in the entry's parameter space. A pointer's Align is its
	// own (8 for .u64), not the .align of the memory it points to.
	Size, Align int
	// Ptr says the parameter is declared .ptr: a pointer.
	Ptr bool
	// PtrAlign is a pointer's .align: the alignment of the memory it
	// points to (0 if not given).
	PtrAlign int
}

// Float reports whether the parameter is a floating-point scalar (.f32,
// .f64, …): not an array, not an untyped .bNN.
func (p Param) Float() bool { return p.Count == 0 && strings.HasPrefix(p.Elem, ".f") }

// Integer reports whether the parameter is a signed or unsigned integer
// scalar (.s32, .u64, …; a pointer is one): not an array, not an untyped
// .bNN.
func (p Param) Integer() bool {
	return p.Count == 0 && (strings.HasPrefix(p.Elem, ".u") || strings.HasPrefix(p.Elem, ".s"))
}

// Error is an error in the parameter list of an entry.
type Error struct {
	Entry string // the entry's name
	Index int    // the parameter's index, -1 for the list itself
	Decl  string // the parameter's declaration
	Msg   string
}

// Error says which entry and declaration, and what is wrong with it.
func (e *Error) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("entry %s: %s", e.Entry, e.Msg)
	}
	return fmt.Sprintf("entry %s: parameter %q: %s", e.Entry, e.Decl, e.Msg)
}

// Limits on what a declaration may say, so that sizes cannot overflow.
const (
	maxAlign = 1 << 16
	maxSize  = 1 << 30
)

// text returns image up to its first NUL byte with its comments replaced
// by spaces (a newline kept for each in a block comment, so that lines
// stay lines).
func text(image []byte) string {
	for i, c := range image {
		if c == 0 {
			image = image[:i]
			break
		}
	}
	s := string(image)
	if !strings.Contains(s, "/") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "//"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				return b.String()
			}
			i += j // the newline is kept
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			end := len(s)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			b.WriteByte(' ')
			b.WriteString(strings.Repeat("\n", strings.Count(s[i:end], "\n")))
			i = end
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String()
}

var (
	versionRE = regexp.MustCompile(`(?m)^\s*\.version\s+(\d+)\.(\d+)`)
	targetRE  = regexp.MustCompile(`(?m)^\s*\.target\s+sm_(\d+)`)
)

// Target returns the compute capability the image's .target directive
// names (90 for sm_90 or sm_90a). An image without a .version directive
// or without a .target sm_NN is an error.
func Target(image []byte) (int, error) {
	t := text(image)
	if !versionRE.MatchString(t) {
		return 0, fmt.Errorf("no .version directive")
	}
	m := targetRE.FindStringSubmatch(t)
	if m == nil {
		return 0, fmt.Errorf("no .target sm_NN directive")
	}
	sm, err := strconv.Atoi(m[1])
	if err != nil || sm > 1<<20 {
		return 0, fmt.Errorf("bad .target sm_%s", m[1])
	}
	return sm, nil
}

// Entries returns the parameter lists of the image's .entry functions, by
// name (an entry without parameters has none). An entry whose list it
// cannot read is left out, and the first such is the error (an *Error):
// the map holds the others.
func Entries(image []byte) (map[string][]Param, error) {
	t := text(image)
	entries := map[string][]Param{}
	var first error
	for i := 0; ; {
		j := strings.Index(t[i:], ".entry")
		if j < 0 {
			break
		}
		at := i + j
		i = at + len(".entry")
		if at > 0 && !isSpaceOrPunct(t[at-1]) || i < len(t) && !isSpace(t[i]) {
			continue // part of a longer word
		}
		name, rest := ident(strings.TrimLeft(t[i:], " \t\r\n"))
		if name == "" {
			if first == nil {
				first = &Error{Entry: "?", Index: -1, Msg: ".entry without a name"}
			}
			continue
		}
		i = len(t) - len(rest)
		rest = strings.TrimLeft(rest, " \t\r\n")
		if !strings.HasPrefix(rest, "(") {
			entries[name] = nil // no parameter list: no parameters
			continue
		}
		end := strings.IndexByte(rest, ')')
		if end < 0 { // nor any later list: stop
			if first == nil {
				first = &Error{Entry: name, Index: -1, Msg: "no ) closing the parameter list"}
			}
			break
		}
		i = len(t) - len(rest) + end + 1
		params, err := paramList(name, rest[1:end])
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		entries[name] = params
	}
	return entries, first
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// isSpaceOrPunct reports whether c can come just before a directive.
func isSpaceOrPunct(c byte) bool { return isSpace(c) || c == '}' || c == ';' || c == ')' }

// ident splits a PTX identifier off the front of s: a letter followed by
// letters, digits, _ and $, or _, $ or % followed by at least one of
// those.
func ident(s string) (name, rest string) {
	n := 0
	for n < len(s) {
		c := s[n]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		digit := c >= '0' && c <= '9'
		if !(letter || c == '_' || c == '$' || (n == 0 && c == '%') || (n > 0 && digit)) {
			break
		}
		n++
	}
	if n == 0 || n == 1 && (s[0] == '_' || s[0] == '$' || s[0] == '%') {
		return "", s
	}
	return s[:n], s[n:]
}

func paramList(entry, list string) ([]Param, error) {
	var params []Param
	for decl := range strings.SplitSeq(list, ",") {
		decl = strings.TrimSpace(decl)
		if decl == "" {
			continue
		}
		p, err := parseParam(decl)
		if err != nil {
			return nil, &Error{Entry: entry, Index: len(params), Decl: strings.Join(strings.Fields(decl), " "), Msg: err.Error()}
		}
		params = append(params, p)
	}
	return params, nil
}

// boundsRE matches an array's bounds and the spaces around their brackets.
var boundsRE = regexp.MustCompile(`\s*\[\s*([^\]]*?)\s*\]`)

// parseParam parses ".param .u64 name", ".param .u64 .ptr .align 1 name"
// or ".param .align 8 .b8 name[24]".
func parseParam(decl string) (Param, error) {
	var f []string
	for _, t := range strings.Fields(boundsRE.ReplaceAllString(decl, "[$1]")) {
		// ".ptr.global.align" is ".ptr .global .align".
		for len(t) > 1 && t[0] == '.' {
			j := strings.IndexByte(t[1:], '.')
			if j < 0 {
				break
			}
			f = append(f, t[:j+1])
			t = t[j+1:]
		}
		f = append(f, t)
	}
	if len(f) < 3 || f[0] != ".param" {
		return Param{}, fmt.Errorf("want .param TYPE NAME")
	}
	p := Param{Decl: strings.Join(f, " ")}
	var typ []string // the tokens of Type
	align := 0
	for i := 1; i < len(f); i++ {
		switch t := f[i]; {
		case t == ".align":
			if i+1 >= len(f) {
				return Param{}, fmt.Errorf(".align without a value")
			}
			v, err := strconv.Atoi(f[i+1])
			if err != nil || v <= 0 || v > maxAlign || v&(v-1) != 0 {
				return Param{}, fmt.Errorf("bad .align %q", f[i+1])
			}
			if align != 0 {
				return Param{}, fmt.Errorf("two .align")
			}
			align = v
			typ = append(typ, t, f[i+1])
			i++
		case t == ".ptr":
			p.Ptr = true
			typ = append(typ, t)
		case t == ".global" || t == ".const" || t == ".local" || t == ".shared":
			if !p.Ptr {
				return Param{}, fmt.Errorf("state space %s without .ptr", t)
			}
			typ = append(typ, t)
		case strings.HasPrefix(t, "."):
			n, err := typeSize(t)
			if err != nil {
				return Param{}, err
			}
			if p.Elem != "" {
				return Param{}, fmt.Errorf("two types, %s and %s", p.Elem, t)
			}
			p.Elem = t
			p.Size = n
			typ = append(typ, t)
		default: // the name, perhaps with bounds
			if i != len(f)-1 {
				return Param{}, fmt.Errorf("%q after the name", strings.Join(f[i+1:], " "))
			}
			if p.Elem == "" {
				return Param{}, fmt.Errorf("no type")
			}
			name, bounds := t, ""
			if j := strings.IndexByte(t, '['); j >= 0 {
				name, bounds = t[:j], t[j:]
			}
			if n, rest := ident(name); n == "" || rest != "" {
				return Param{}, fmt.Errorf("bad name %q", name)
			}
			p.Name = name
			elem := p.Size
			if bounds != "" {
				count, err := arrayCount(bounds, elem)
				if err != nil {
					return Param{}, err
				}
				p.Count = count
				p.Size = elem * count
				typ[len(typ)-1] += bounds
			}
			p.Align = elem
			if p.Ptr {
				if p.Count != 0 || elem != 4 && elem != 8 || !strings.HasPrefix(p.Elem, ".u") && !strings.HasPrefix(p.Elem, ".b") && !strings.HasPrefix(p.Elem, ".s") {
					return Param{}, fmt.Errorf(".ptr of %s: a pointer is .u32 or .u64", p.Elem)
				}
				p.PtrAlign = align
			} else if align != 0 {
				p.Align = align
			}
			p.Type = strings.Join(typ, " ")
			return p, nil
		}
	}
	return Param{}, fmt.Errorf("no name")
}

// arrayCount returns the number of elements of bounds ("[24]" or
// "[2][3]") of elements of elem bytes.
func arrayCount(bounds string, elem int) (int, error) {
	count := 1
	for rest := bounds; rest != ""; {
		if rest[0] != '[' {
			return 0, fmt.Errorf("bad array bounds %q", bounds)
		}
		j := strings.IndexByte(rest, ']')
		if j < 0 {
			return 0, fmt.Errorf("bad array bounds %q", bounds)
		}
		v, err := strconv.Atoi(rest[1:j])
		if err != nil || v <= 0 || v > maxSize {
			return 0, fmt.Errorf("bad array bound %q", rest[1:j])
		}
		count *= v
		if count*elem > maxSize {
			return 0, fmt.Errorf("array %s too large", bounds)
		}
		rest = rest[j+1:]
	}
	return count, nil
}

// typeSize returns the bytes of a PTX fundamental type.
func typeSize(t string) (int, error) {
	switch t {
	case ".u8", ".s8", ".b8":
		return 1, nil
	case ".u16", ".s16", ".b16", ".f16", ".bf16":
		return 2, nil
	case ".u32", ".s32", ".b32", ".f32", ".f16x2", ".bf16x2":
		return 4, nil
	case ".u64", ".s64", ".b64", ".f64":
		return 8, nil
	case ".b128":
		return 16, nil
	}
	return 0, fmt.Errorf("unknown type %s", t)
}
