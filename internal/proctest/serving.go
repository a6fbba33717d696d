package proctest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// ServingAddr reads a device process's standard error until the line that
// says where it serves ("goffload device (pid N) serving on ADDR") and
// returns ADDR, with the scanner positioned after that line for the ones
// that follow. It fails if the output ends first.
func ServingAddr(stderr io.Reader) (string, *bufio.Scanner, error) {
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if _, a, ok := strings.Cut(sc.Text(), " serving on "); ok {
			return a, sc, nil
		}
	}
	return "", sc, fmt.Errorf("the device process did not say where it serves: %v", sc.Err())
}

// Relay copies the rest of sc's lines to the test binary's standard
// error, each after prefix, in a goroutine of its own: what a device
// process says later (a refused host, a lost link) shows where the test's
// output goes, and its pipe never fills.
func Relay(sc *bufio.Scanner, prefix string) {
	go func() {
		for sc.Scan() {
			fmt.Fprintln(os.Stderr, prefix+sc.Text())
		}
	}()
}
