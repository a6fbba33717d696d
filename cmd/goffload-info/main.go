// Command goffload-info lists every device the runtime finds, with its
// properties, like llvm-offload-device-info does for libomptarget.
//
//	go run ./cmd/goffload-info
//	GOFFLOAD_DEVICES=host:2 go run ./cmd/goffload-info
package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/goffload/offload"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "goffload-info:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	if err := offload.Start(); err != nil {
		return err
	}
	defer offload.Stop()
	n := offload.NumDevices()
	fmt.Fprintf(out, "goffload: %d device(s), default device %d, initial device %d\n\n", n, offload.Default().Num(), n)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NUM\tKIND\tNAME\tCORES\tMEMORY\tARCH\tHOST\tPID\tSPEC")
	for i := 0; i <= n; i++ {
		info, err := offload.On(i).Info()
		if err != nil {
			fmt.Fprintf(w, "%d\t-\tunavailable: %v\t\t\t\t\t\t\n", i, err)
			continue
		}
		spec, kind := info.Spec, info.Kind
		if info.Initial {
			spec = "(initial device)"
		}
		if info.Serves != "" { // a device process's device of another kind
			kind += "[" + info.Serves + "]"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\n", info.Num, kind, info.Name, info.Cores,
			bytes(info.Memory), info.Arch, info.Host, info.PID, spec)
	}
	return w.Flush()
}

func bytes(n int64) string {
	switch {
	case n <= 0:
		return "-"
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}
