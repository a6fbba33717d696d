package core

import (
	"testing"
	"unsafe"
)

// FuzzTaskDeps drives the dependence history with random tasks on random
// sections of one array (in, out or inout; one to three each) and random
// completions, and checks OpenMP's order against a model: a task comes
// after every earlier task not finished whose section overlaps one of its
// own where either writes — by an edge, or through the tasks it waits for
// (edges need not repeat what a predecessor already orders). A task
// completes only once its predecessors have.
func FuzzTaskDeps(f *testing.F) {
	f.Add([]byte{0x10, 0x23, 0x41, 0x02, 0x80, 0x35, 0x17, 0x91, 0x06})
	f.Add([]byte{0x00, 0x03, 0x21, 0x03, 0x21, 0x13, 0x05, 0x21, 0x13, 0x05, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		const slots = 16
		r := taskRuntime()
		buf := make([]int64, slots)
		type sec struct {
			kind   DepKind
			lo, hi int
		}
		var (
			tasks []*Task
			secs  [][]sec
			preds [][]int // by index
			done  []bool
		)
		index := map[*Task]int{}
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		var anc []uint64 // the tasks each is ordered after, through the edges
		for len(data) > 0 && len(tasks) < 64 {
			op := next()
			if op&0xc0 == 0xc0 { // complete the oldest task that can
				for k := range tasks {
					if done[k] {
						continue
					}
					ready := true
					for _, p := range preds[k] {
						ready = ready && done[p]
					}
					if ready {
						r.complete(tasks[k], nil, nil)
						done[k] = true
						break
					}
				}
				continue
			}
			n := int(op&3)%3 + 1
			var ss []sec
			var deps []Dep
			for range n {
				b := next()
				lo := int(b>>4) % slots
				size := int(b&7) + 1
				hi := min(lo+size, slots)
				kind := DepKind(int(b>>3&1) + int(op>>(2+len(ss))&1)) // in, out or inout
				ss = append(ss, sec{kind, lo, hi})
				deps = append(deps, Dep{Kind: kind, Addr: uintptr(unsafe.Pointer(&buf[lo])), Size: uintptr(hi-lo) * 8, Keep: unsafe.Pointer(&buf[0])})
			}
			task := &Task{done: make(chan struct{})}
			ps := r.register(task, deps)
			j := len(tasks)
			tasks, secs, done = append(tasks, task), append(secs, ss), append(done, false)
			index[task] = j
			var pi []int
			var a uint64
			for _, p := range ps {
				pi = append(pi, index[p])
				a |= anc[index[p]] | 1<<index[p]
			}
			preds, anc = append(preds, pi), append(anc, a)
			for i := range j {
				if done[i] {
					continue
				}
				conflict := false
				for _, a := range secs[i] {
					for _, b := range ss {
						if a.lo < b.hi && b.lo < a.hi && (a.kind != DepIn || b.kind != DepIn) {
							conflict = true
						}
					}
				}
				if conflict && anc[j]>>i&1 == 0 {
					t.Fatalf("task %d (%v) is not ordered after task %d (%v), which it conflicts with", j, ss, i, secs[i])
				}
			}
		}
	})
}
