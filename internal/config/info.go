package config

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
)

// InfoFlags selects what the info output shows (GOFFLOAD_INFO), with the bit
// values of libomptarget's LIBOMPTARGET_INFO.
type InfoFlags uint32

// Info bits, named as in GOFFLOAD_INFO.
const (
	InfoKernelArgs     InfoFlags = 0x01  // "kernel-args": arguments of each kernel launch
	InfoMappingExists  InfoFlags = 0x02  // "mapping-exists": a map that found its buffer present
	InfoDumpTable      InfoFlags = 0x04  // "table": the present table at Stop and after a failure
	InfoMappingChanged InfoFlags = 0x08  // "mapping": entries created and removed
	InfoKernels        InfoFlags = 0x10  // "kernels": kernel launches and where they ran
	InfoCopies         InfoFlags = 0x20  // "copies": data copies, with addresses, size and name
	InfoOffload        InfoFlags = 0x100 // "offload": device selection and fallback to the initial device
	InfoPlacement      InfoFlags = 0x200 // "placement": where Any-tasks go and why, and the copies their data needs
	InfoAll            InfoFlags = 0xffffffff
)

var infoNames = []struct {
	name string
	flag InfoFlags
}{
	{"kernel-args", InfoKernelArgs},
	{"mapping-exists", InfoMappingExists},
	{"table", InfoDumpTable},
	{"mapping", InfoMappingChanged},
	{"kernels", InfoKernels},
	{"copies", InfoCopies},
	{"offload", InfoOffload},
	{"placement", InfoPlacement},
	{"all", InfoAll},
}

// ParseInfo parses GOFFLOAD_INFO: names separated by commas ("copies,mapping",
// "all"), a number (decimal or 0x hex, as LIBOMPTARGET_INFO takes), or empty.
func ParseInfo(s string) (InfoFlags, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if v, err := strconv.ParseUint(s, 0, 32); err == nil {
		return InfoFlags(v), nil
	}
	var f InfoFlags
	for _, part := range strings.Split(s, ",") {
		part = strings.ToLower(strings.TrimSpace(part))
		found := false
		for _, n := range infoNames {
			if n.name == part {
				f |= n.flag
				found = true
			}
		}
		if !found {
			var names []string
			for _, n := range infoNames {
				names = append(names, n.name)
			}
			return 0, fmt.Errorf("%w: GOFFLOAD_INFO item %q: want a number or names from %s", ErrConfig, part, strings.Join(names, ", "))
		}
	}
	return f, nil
}

// Logger writes info lines for the enabled flags. The zero value writes
// nothing.
type Logger struct {
	flags InfoFlags
	mu    sync.Mutex
	out   io.Writer
}

// NewLogger returns a logger for flags writing to out (stderr if nil).
func NewLogger(flags InfoFlags, out io.Writer) *Logger {
	if out == nil {
		out = os.Stderr
	}
	return &Logger{flags: flags, out: out}
}

// On reports whether any of f is enabled.
func (l *Logger) On(f InfoFlags) bool { return l != nil && l.flags&f != 0 }

// Printf writes one line, prefixed with the device number, if f is enabled.
// dev < 0 means no device.
func (l *Logger) Printf(f InfoFlags, dev int, format string, args ...any) {
	if !l.On(f) {
		return
	}
	l.write(dev, fmt.Sprintf(format, args...))
}

// Taskf is Printf for a line about task (or synchronous construct) number
// task, which the line names after the device.
func (l *Logger) Taskf(f InfoFlags, dev int, task uint64, format string, args ...any) {
	if !l.On(f) {
		return
	}
	l.write(dev, fmt.Sprintf("task %d: ", task)+fmt.Sprintf(format, args...))
}

func (l *Logger) write(dev int, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if dev >= 0 {
		fmt.Fprintf(l.out, "goffload device %d info: %s\n", dev, msg)
	} else {
		fmt.Fprintf(l.out, "goffload info: %s\n", msg)
	}
}
