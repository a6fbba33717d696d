// Command goffload-stress is the soak and chaos test of the runtime: it runs
// many tasks from several goroutines with random dependencies over random
// buffers on every device (the initial device and host work included),
// optionally kills and stops device processes mid-run, checks every buffer
// against a sequential reference, and reports host memory and goroutines at
// intervals.
//
//	go run ./cmd/goffload-stress                           # 100,000 tasks on host,local:2
//	go run ./cmd/goffload-stress -tasks 1000000 -report 5s
//	go run ./cmd/goffload-stress -kill 2s -stop 1s -stop-for 500ms
//	GOFFLOAD_DEVICES=local:4 go run ./cmd/goffload-stress
//
// Every shared buffer holds equal int64 elements. A task picks 1 to 3
// buffers, each written (depend inout or out, map tofrom) or read (depend
// in, map to), and a device or the host; it checks that every buffer it
// sees has all its elements equal (no task may see a half-updated buffer)
// and adds its value v to the buffers it writes. A buffer's reference is
// its initial value plus the values of the writers whose Wait returned nil.
// Each goroutine also runs enter data / update / exit data sequences on a
// private buffer.
//
// Without faults every task must succeed and every element must equal its
// reference. With faults a failed task may have applied its value or not, so
// an element must lie between its successes and its successes plus its
// failures, and every failed task's error must name its device.
//
// With -graph each goroutine instead records a random task graph over
// buffers of its own (launches with depend clauses, updates; with -any,
// Any-tasks), replays it many times with new scalars and contents, and
// checks every element after each replay against a sequential model; a
// replay that breaks a rule must fail with ErrGraphChanged and run
// nothing. A replay failed by a lost device ends its graph; the next is
// recorded on a surviving device (graphmode.go).
//
//	go run ./cmd/goffload-stress -graph -devices local:2 -kill 1s
//
// Exit status: 0 clean; 1 data loss, a half-updated buffer seen, a graph
// replay that broke a rule and was not refused, an error
// naming no device, or a failure with no fault injected; 2 a hang (the run
// did not finish within -timeout: the goroutines are dumped to stderr); 3
// host RSS past -max-rss (the run is stopped there, to spare the machine).
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/goffload/offload/role"
)

func main() {
	role.ServeDevice() // device processes are this program: they serve and end here
	cfg := config{Out: os.Stdout, Errs: os.Stderr, HardGrace: 30 * time.Second, Hard: func() { os.Exit(2) }}
	flag.Int64Var(&cfg.Tasks, "tasks", 100000, "tasks to run in all")
	flag.IntVar(&cfg.Goroutines, "goroutines", 8, "goroutines creating tasks")
	flag.IntVar(&cfg.Buffers, "buffers", 64, "shared buffers (at least 3)")
	flag.IntVar(&cfg.Len, "len", 16, "int64 elements per buffer")
	flag.IntVar(&cfg.Window, "window", 32, "tasks each goroutine keeps in flight")
	flag.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "random seed")
	devices := flag.String("devices", "", "GOFFLOAD_DEVICES for the run (default: the environment's, or host,local:2 when it is unset)")
	flag.DurationVar(&cfg.Report, "report", 2*time.Second, "interval of the progress lines (0: none)")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "the whole run; past it the run is a hang (exit 2)")
	flag.Float64Var(&cfg.Epochs, "epochs", 0.02, "fraction of picks that are enter/update/exit data sequences (6 tasks) on a private buffer")
	flag.DurationVar(&cfg.Kill, "kill", 0, "SIGKILL a random device process every this long (0: never)")
	flag.Int64Var(&cfg.KillAfter, "kill-after", 0, "SIGKILL a random device process once this many tasks completed (0: never)")
	flag.IntVar(&cfg.KillMax, "kill-max", 0, "most device processes killed (0: all)")
	flag.DurationVar(&cfg.Stop, "stop", 0, "SIGSTOP a random device process every this long (0: never)")
	flag.Int64Var(&cfg.StopAfter, "stop-after", 0, "SIGSTOP a random device process once this many tasks completed (0: never)")
	flag.DurationVar(&cfg.StopFor, "stop-for", time.Second, "how long a stopped device process stays stopped (0: for the rest of the run)")
	flag.DurationVar(&cfg.Taskwait, "taskwait", 0, "also call Taskwait every this long during the run (0: only at the end)")
	flag.BoolVar(&cfg.Any, "any", false, "Any mode: Any-tasks and host tasks over the shared buffers, in epochs ended by Taskwait and an exact check (see anymode.go); -kill-max 0 then means all device processes but one per runtime, stops included")
	flag.BoolVar(&cfg.Graph, "graph", false, "graph mode: each goroutine records random task graphs over buffers of its own and replays them with new scalars and contents, checked after each replay (see graphmode.go); with -any, graphs of Any() tasks")
	flag.Int64Var(&cfg.AnyEpoch, "epoch", 2000, "Any mode: tasks per epoch")
	flag.Float64Var(&cfg.AnyWait, "wait", 0.05, "Any mode: fraction of tasks waited for with Wait (which copies what they wrote back) rather than until done")
	maxRSS := flag.Int64("max-rss", 4096, "MiB of host RSS past which the run stops with exit status 3 (0: no limit)")
	flag.Parse()
	cfg.MaxRSS = *maxRSS << 20
	cfg.OverMemory = func() { os.Exit(3) }
	cfg.Devices = *devices
	if _, set := os.LookupEnv("GOFFLOAD_DEVICES"); !set && cfg.Devices == "" {
		cfg.Devices = "host,local:2"
		if cfg.Any {
			cfg.Devices = "local:3" // devices that can all be lost: Any() places on these only
		}
	}
	res, err := run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	res.Errors.write(os.Stdout, 20)
	res.Errors.writeDevices(os.Stdout)
	fmt.Println(res.summary())
	if res.Any != nil {
		fmt.Println(res.Any.summary())
	}
	if res.Graph != nil {
		fmt.Println(res.Graph.summary())
	}
	code, why := res.verdict()
	fmt.Println("goffload-stress:", why)
	os.Exit(code)
}
