package offload_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/plugins/host"
)

// SleepMs sleeps ms milliseconds on its device, then adds 1 to x.
var SleepMs = offload.MustKernel2("graph.sleepms", func(_ offload.Ctx, ms int32, x offload.InOut[int32]) {
	time.Sleep(time.Duration(ms) * time.Millisecond)
	for i := range x {
		x[i]++
	}
})

// framesOf is what the host queued for device dev so far, by frame type.
func framesOf(t *testing.T, dev int) map[string]uint64 {
	t.Helper()
	fs, ok := offload.PluginDevice(dev).(interface{ FramesSent() map[string]uint64 })
	if !ok {
		t.Fatalf("device %d counts no frames", dev)
	}
	return fs.FramesSent()
}

// TestTaskgraphDeviceParts replays random graphs of kernels and copies
// between devices on local:2 and on two sessions of one tcp:// process
// (as bench's tcp2-graph) against fresh runs, with new scalars (Run) and
// the same (Replay): after the record, each replay is one GraphRun frame
// per device and no other frame but the forgetting of events; the first
// one defines the parts.
//
// On host:2 the host devices' parts replay it (host.GraphsDefined counts
// them).
func TestTaskgraphDeviceParts(t *testing.T) {
	for _, devs := range []string{"local:2", "tcp", "host:2"} {
		t.Run(devs, func(t *testing.T) {
			if devs == "tcp" {
				startTCPDevice(t)
				devs = tcpSpec(2)
			}
			start(t, offload.WithDevices(devs), offload.WithOffload("MANDATORY"))
			hosts := devs == "host:2"
			defined := host.GraphsDefined()
			framesOf := func(t *testing.T, dev int) map[string]uint64 {
				if hosts {
					return nil
				}
				return framesOf(t, dev)
			}
			const nd, nb, n = 2, 4, 64
			for seed := range 2 {
				rng := rand.New(rand.NewPCG(uint64(seed), 45))
				ops := randomGraph(rng, 40, nb, nd)
				for i := range ops {
					if ops[i].kind > 2 { // no copy to or from the host: every node in the devices' parts
						ops[i].kind = i % 2
					}
				}
				fresh, rec := newBufs(nb, n, 1), newBufs(nb, n, 1)
				mapAll(t, fresh, nd)
				mapAll(t, rec, nd)
				var it int32
				tg := offload.NewTaskgraph(func(r *offload.Recorder) error {
					build(ops, rec, it, r.Nowait)
					return nil
				})
				for it = range 4 {
					if it == 2 {
						setContents(t, fresh, nd, it)
						setContents(t, rec, nd, it)
					}
					for _, again := range []bool{false, true} {
						build(ops, fresh, it, offload.Device.Nowait)
						if err := offload.Taskwait(context.Background()); err != nil {
							t.Fatal(err)
						}
						before := [nd]map[string]uint64{framesOf(t, 0), framesOf(t, 1)}
						run := tg.Run
						if again {
							run = tg.Replay
						}
						task := run()
						if err := task.Wait(); err != nil {
							t.Fatalf("graph %d, run %d (Replay %v): %v", seed, it, again, err)
						}
						if hosts && (it > 0 || again) {
							if got := host.GraphsDefined() - defined; got != 1 {
								t.Fatalf("graph %d, run %d (Replay %v): %d graphs defined on the host devices, want 1", seed, it, again, got)
							}
						}
						for d := range nd {
							after := framesOf(t, d)
							if it == 0 && !again {
								continue // the record: the tasks' own frames
							}
							for typ, k := range after {
								k -= before[d][typ]
								switch {
								case typ == "graphrun" && k != 1:
									t.Errorf("graph %d, run %d (Replay %v): device %d got %d graphrun frames, want 1", seed, it, again, d, k)
								case typ == "graphdef" && k > 0 && (it != 0 || !again):
									t.Errorf("graph %d, run %d (Replay %v): device %d got %d graphdef frames after the first replay", seed, it, again, d, k)
								case typ == "ping":
									// The link's keepalives keep their own clock: a
									// replay on a loaded machine can last past one.
								case typ != "graphrun" && typ != "graphdef" && typ != "forget" && k > 0:
									t.Errorf("graph %d, run %d (Replay %v): device %d got %d %s frames in a replay", seed, it, again, d, k, typ)
								}
							}
						}
						want, got := snapshot(t, fresh, nd), snapshot(t, rec, nd)
						for i := range want {
							if !slices.Equal(got[i], want[i]) {
								t.Fatalf("graph %d, run %d (Replay %v): device %d (%d: the program's memory) buffer %d:\n got %v\nwant %v", seed, it, again, i/nb, nd, i%nb, got[i][:8], want[i][:8])
							}
						}
					}
				}
				tg.Reset() // its last replay is done: the parts go at once
				if got := host.GraphsDefined(); got != defined {
					t.Errorf("graph %d: %d graphs defined on host devices after Reset, want %d", seed, got, defined)
				}
				for d := range nd {
					if hosts {
						break
					}
					if got := framesOf(t, d)["graphfree"]; got != uint64(seed+1) {
						t.Errorf("graph %d: device %d got %d graphfree frames after %d resets", seed, d, got, seed+1)
					}
				}
			}
		})
	}
}

// TestTaskgraphPartsDeviceKilled: a device process killed while its part
// of a replay runs (a kernel that sleeps 10 s, its scalar the replay's)
// fails the replay within the device timeout with ErrDeviceLost naming
// it; the other device's part, which waits for the dead one's signals,
// does not hang.
func TestTaskgraphPartsDeviceKilled(t *testing.T) {
	if err := offload.Start(offload.WithDevices("local:2"), offload.WithOffload("MANDATORY")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop() // its error is the device's death
	x := filled(64, 0)
	d0, d1 := offload.On(0), offload.On(1)
	for _, d := range []offload.Device{d0, d1} {
		if err := d.EnterData(offload.To(x)); err != nil {
			t.Fatal(err)
		}
	}
	var ms int32
	tg := offload.NewTaskgraph(func(r *offload.Recorder) error {
		for range 3 {
			AddN.Nowait(r.Nowait(d0, offload.DependInOut(x)), 1, x)
			offload.CopyNowait(r.Nowait(d1, offload.DependInOut(x)), d1, x, d0, x)
			SleepMs.Nowait(r.Nowait(d1, offload.DependInOut(x)), ms, x)
			offload.CopyNowait(r.Nowait(d0, offload.DependInOut(x)), d0, x, d1, x)
		}
		return nil
	})
	for range 2 { // the record, then a replay that defines the parts
		if err := tg.Run().Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if got := framesOf(t, 1)["graphdef"]; got == 0 {
		t.Fatal("device 1 got no graphdef frame: the replay did not use the device's part")
	}
	info, err := d1.Info()
	if err != nil {
		t.Fatal(err)
	}
	ms = 10000
	running := tg.Run()
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	err = running.WaitContext(ctx)
	if !errors.Is(err, offload.ErrDeviceLost) || !strings.Contains(err.Error(), "local device 1") {
		t.Fatalf("the replay running as device 1 died: %v, want ErrDeviceLost naming local device 1", err)
	}
	_ = offload.Taskwait(ctx)
	if err := AddN.Nowait(d0.Nowait(), 1, x).WaitContext(ctx); err != nil {
		t.Errorf("a task on device 0 after device 1 died: %v", err)
	}
}
