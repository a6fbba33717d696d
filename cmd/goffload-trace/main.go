// Command goffload-trace summarizes a trace that GOFFLOAD_PROFILE wrote:
// where the time went, in numbers, before (or instead of) opening it in
// Perfetto.
//
//	GOFFLOAD_PROFILE=trace.json go run ./examples/jacobi
//	go run ./cmd/goffload-trace trace.json
//
// It prints, per device, how busy its busiest queues were (the device-side
// times of their kernels and copies, and of their waits, against the time
// from a queue's first operation to its last);
// per kernel, how long it ran on the device; per kind of copy, bytes and
// bandwidth; and for the dependency arrows, the gap from the end of the
// task waited for to the start of the waiting task's first operation, on
// one device and across devices: the cost of a dependency.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/goffload/offload/internal/tracefile"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the command with its arguments and outputs; it returns the exit
// status: 0, 1 for a trace that cannot be read, 2 for bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goffload-trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: goffload-trace TRACE.json")
		fmt.Fprintln(stderr, "summarizes a trace that GOFFLOAD_PROFILE wrote: per device its busiest queues, per kernel its device time, copies' bandwidth, and what dependencies cost")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	f, err := os.Open(fs.Arg(0))
	if err == nil {
		err = summarize(f, stdout)
		f.Close()
	}
	if err != nil {
		fmt.Fprintln(stderr, "goffload-trace:", err)
		return 1
	}
	return 0
}

// maxQueues is how many queues of a device the summary lists, busiest
// first.
const maxQueues = 8

// summarize reads a trace from r and writes its summary to w.
func summarize(r io.Reader, w io.Writer) error {
	evs, err := tracefile.Read(r)
	if err != nil {
		return err
	}
	procs, threads := map[int]string{}, map[[2]int]string{}
	queues := map[[2]int][]tracefile.Event{}
	kernels := map[string][]float64{}
	type copyStat struct {
		n           int
		bytes, time float64
	}
	copies := map[string]*copyStat{}
	flows := map[uint64][]tracefile.Event{}
	tasks := 0
	for _, e := range evs {
		switch {
		case e.Ph == "M" && e.Name == "process_name":
			procs[e.Pid], _ = e.Args["name"].(string)
		case e.Ph == "M" && e.Name == "thread_name":
			threads[[2]int{e.Pid, e.Tid}], _ = e.Args["name"].(string)
		case e.Ph == "X" && e.Cat == "task":
			tasks++
		case e.Ph == "X" && (e.Cat == "kernel" || e.Cat == "copy" || e.Cat == "device" || (e.Cat == "wait" && e.Args["op"] == "wait")):
			k := [2]int{e.Pid, e.Tid}
			queues[k] = append(queues[k], e)
			switch e.Cat {
			case "kernel":
				kernels[e.Name] = append(kernels[e.Name], e.Dur)
			case "copy":
				kind, _ := e.Args["kind"].(string)
				c := copies[kind]
				if c == nil {
					c = &copyStat{}
					copies[kind] = c
				}
				b, _ := e.Args["bytes"].(float64)
				c.n, c.bytes, c.time = c.n+1, c.bytes+b, c.time+e.Dur
			}
		case e.Ph == "s" || e.Ph == "f":
			flows[e.ID] = append(flows[e.ID], e)
		}
	}
	if tasks == 0 && len(queues) == 0 {
		return errors.New("the trace has no tasks and no device operations")
	}
	fmt.Fprintf(w, "%d tasks, %d device operations\n\n", tasks, countOps(queues))

	// Queues, per device, busiest first: work (kernels and copies) and
	// waits against the time from a queue's first operation to its last.
	type queueStat struct {
		k                       [2]int
		n                       int
		work, wait, first, last float64
	}
	perDev := map[int][]queueStat{}
	for k, evs := range queues {
		q := queueStat{k: k, n: len(evs), first: math.Inf(1), last: math.Inf(-1)}
		for _, e := range evs {
			if e.Cat == "wait" {
				q.wait += e.Dur
			} else {
				q.work += e.Dur
			}
			q.first, q.last = min(q.first, e.Ts), max(q.last, e.End())
		}
		perDev[k[0]] = append(perDev[k[0]], q)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "device\tqueue\toperations\twork ms\twaiting ms\tspan ms\twork %\t")
	for _, d := range sortedKeys(perDev) {
		qs := perDev[d]
		sort.Slice(qs, func(i, j int) bool {
			return qs[i].work > qs[j].work || qs[i].work == qs[j].work && qs[i].k[1] < qs[j].k[1]
		})
		for i, q := range qs {
			if i == maxQueues {
				fmt.Fprintf(tw, "%d\t%d more queues\t\t\t\t\t\t\n", d, len(qs)-i)
				break
			}
			span := q.last - q.first
			pct := 0.0
			if span > 0 {
				pct = 100 * q.work / span
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.0f\t\n", d, threads[q.k], q.n, q.work/1e3, q.wait/1e3, span/1e3, pct)
		}
	}
	tw.Flush()
	for _, p := range sortedKeys(procs) {
		fmt.Fprintf(w, "  device %d: %s\n", p, procs[p])
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kernel\tcount\ttotal ms\tmean µs\tp50 µs\tp90 µs\t")
	for _, name := range sortedKeys(kernels) {
		d := kernels[name]
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.1f\t%.1f\t%.1f\t\n", strings.TrimPrefix(name, "kernel "), len(d), sum(d)/1e3, sum(d)/float64(len(d)), quantile(d, 0.5), quantile(d, 0.9))
	}
	tw.Flush()

	if len(copies) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "copy\tcount\tMiB\ttotal ms\tGB/s\t")
		for _, kind := range sortedKeys(copies) {
			c := copies[kind]
			gbps := 0.0
			if c.time > 0 {
				gbps = c.bytes / c.time / 1e3
			}
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t\n", kind, c.n, c.bytes/(1<<20), c.time/1e3, gbps)
		}
		tw.Flush()
	}

	// Dependencies: from the end of the source slice (the task waited for)
	// to the start of the target (the waiting task's first operation, or
	// its span).
	var same, cross []float64
	for _, f := range flows {
		if len(f) != 2 {
			continue
		}
		s, t := f[0], f[1]
		if s.Ph != "s" {
			s, t = t, s
		}
		if s.Ph != "s" || t.Ph != "f" {
			continue
		}
		gap := t.Ts - s.Ts
		if s.Pid == t.Pid {
			same = append(same, gap)
		} else {
			cross = append(cross, gap)
		}
	}
	if len(same)+len(cross) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "dependency\tcount\tp50 µs\tp90 µs\t")
		for _, c := range []struct {
			name string
			gaps []float64
		}{{"same device", same}, {"across devices", cross}} {
			if len(c.gaps) > 0 {
				fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t\n", c.name, len(c.gaps), quantile(c.gaps, 0.5), quantile(c.gaps, 0.9))
			}
		}
		tw.Flush()
		fmt.Fprintln(w, "  (from the end of the task waited for to the start of the waiting task's first device operation)")
	}
	return nil
}

func countOps(queues map[[2]int][]tracefile.Event) int {
	n := 0
	for _, evs := range queues {
		n += len(evs)
	}
	return n
}

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

// quantile returns the q-quantile of v (nearest rank).
func quantile(v []float64, q float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func sortedKeys[K int | string, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
