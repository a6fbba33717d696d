package offload_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

// TestDependClauseObjects checks what a depend clause may name: a
// non-empty slice (of any slice type), a non-nil pointer, or either held
// in an interface; anything else is an error naming its type, on the task
// and from its Wait, never a panic.
func TestDependClauseObjects(t *testing.T) {
	start(t, offload.WithDevices("host:1"))
	x := make([]int32, 8)
	var y float64
	var in offload.In[int32] = x
	var boxed any = x
	for _, d := range []offload.Dep{
		offload.DependInOut(x), offload.DependIn(in), offload.DependOut(&y),
		offload.DependIn(boxed), offload.DependInOut(any(&y)), offload.DependIn(&x),
	} {
		if err := offload.Nowait(d).Go("ok", func() error { return nil }).Wait(); err != nil {
			t.Errorf("a task depending on a slice or a pointer: %v", err)
		}
	}
	var nilp *float64
	for _, c := range []struct {
		dep  offload.Dep
		what string
	}{
		{offload.DependIn(x[:0]), "[]int32"},
		{offload.DependOut(nilp), "*float64"},
		{offload.DependInOut(3), "int"},
		{offload.DependIn[any](nil), "<nil>"},
		{offload.DependIn(any(x[:0])), "[]int32"},
	} {
		err := offload.Nowait(c.dep).Go("bad", func() error { return nil }).Wait()
		if !errors.Is(err, offload.ErrBadArgument) || !strings.Contains(err.Error(), "depend on a "+c.what+":") {
			t.Errorf("a task depending on a %s: %v, want ErrBadArgument naming the type", c.what, err)
		}
	}
}

// TestDependClauseOrders checks that the generic clauses order tasks by the
// object's memory, however it is passed: a slice and an interface holding
// it are one object, a pointer to an element overlaps the slice. The
// first task is held until the others are made.
func TestDependClauseOrders(t *testing.T) {
	start(t, offload.WithDevices("host:1"))
	x := make([]int, 4)
	var boxed any = x
	var got []int
	step := func(i int) func() error {
		return func() error { got = append(got, i); x[0] = i; return nil }
	}
	release := make(chan struct{})
	offload.Nowait(offload.DependOut(x)).Go("a", func() error { <-release; return step(1)() })
	offload.Nowait(offload.DependInOut(boxed)).Go("b", step(2))
	last := offload.Nowait(offload.DependIn(&x[0])).Go("c", step(3))
	close(release) // b and c, had they not waited for a, would have run by now or before a
	if err := last.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Errorf("tasks ran in the order %v, want [1 2 3]", got)
	}
}
