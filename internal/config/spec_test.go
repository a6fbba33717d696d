package config

import (
	"errors"
	"testing"

	_ "github.com/goffload/offload/plugins/host"
	_ "github.com/goffload/offload/plugins/remote"
)

// TestSpecsAsWritten: an item reads back as the user wrote it (the kind in
// lower case): goffload-info and errors show tcp://HOST:PORT, not
// tcp:HOST:PORT.
func TestSpecsAsWritten(t *testing.T) {
	specs, err := ParseDevices(" host , Local:2,tcp://127.0.0.1:7070,local[host],local:2[host+host] ")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sp := range specs {
		got = append(got, sp.String())
	}
	want := []string{"host", "local:2", "tcp://127.0.0.1:7070", "local[host]", "local:2[host+host]"}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("item %d: %q, want %q", i, got[i], want[i])
		}
	}
	if specs, err := ParseDevices("  "); err != nil || len(specs) != 0 {
		t.Errorf("blank: %v %v, want no devices", specs, err)
	}
	if _, err := ParseDevices("host,,local"); !errors.Is(err, ErrConfig) {
		t.Errorf("empty item: %v", err)
	}
}
