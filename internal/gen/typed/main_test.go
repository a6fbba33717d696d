package main

import (
	"bytes"
	"os"
	"testing"
)

// The committed typed_kernels.go is what the generator writes: run
// go generate ./... after changing the generator.
func TestGeneratedUpToDate(t *testing.T) {
	want, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../../typed_kernels.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("typed_kernels.go is not what internal/gen/typed writes: run go generate ./... in the module's root")
	}
}
