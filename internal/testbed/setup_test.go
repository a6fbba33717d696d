package testbed

import (
	"errors"
	"net/netip"
	"os"
	"testing"
)

// TestPickSubnet: the first 10.231.X.0/24 that no route or address
// overlaps, default routes aside.
func TestPickSubnet(t *testing.T) {
	routes := `default via 192.0.2.1 dev eth0
10.231.0.0/24 dev gtbx-1 proto kernel scope link src 10.231.0.254
10.231.1.128/25 dev foo scope link
local 10.231.2.7 dev bar table local proto kernel scope host src 10.231.2.7
broadcast 10.231.3.255 dev baz table local proto kernel scope link src 10.231.3.254
unreachable 10.231.4.0/23
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2
`
	addrs := `2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\       valid_lft forever preferred_lft forever
7: qux    inet 10.231.6.9/30 scope global qux\       valid_lft forever preferred_lft forever
`
	taken := append(routePrefixes(routes), addrPrefixes(addrs)...)
	p, err := pickSubnet(taken)
	if want := netip.MustParsePrefix("10.231.7.0/24"); err != nil || p != want {
		t.Errorf("pickSubnet: %v, %v; want %v", p, err, want)
	}
	// A route over all of 10/8 leaves nothing.
	if p, err := pickSubnet(append(taken, netip.MustParsePrefix("10.0.0.0/8"))); err == nil {
		t.Errorf("with 10.0.0.0/8 routed: %v, want an error", p)
	}
	if p, err := pickSubnet(routePrefixes("default via 10.231.0.1 dev eth0\n")); err != nil || p.Addr() != netip.MustParseAddr("10.231.0.0") {
		t.Errorf("a default route alone: %v, %v; want 10.231.0.0/24", p, err)
	}
}

// TestParseID: an owner is read back from the names a bed gives.
func TestParseID(t *testing.T) {
	for _, c := range []struct {
		s  string
		ok bool
		o  owner
	}{
		{"goffload-tb-123-456-7-0", true, owner{123, 456}},
		{"goffload-tb-123-456-7", true, owner{123, 456}},
		{"goffload-tb-123-456", false, owner{}},
		{"goffload-cl-123-0", false, owner{}},
		{"goffload-tb-x-456-7", false, owner{}},
		{"goffload-tb-0-456-7", false, owner{}},
		{"", false, owner{}},
	} {
		if o, ok := parseID(c.s); ok != c.ok || o != c.o {
			t.Errorf("parseID(%q) = %v, %v; want %v, %v", c.s, o, ok, c.o, c.ok)
		}
	}
	me, err := selfOwner()
	if err != nil || !me.alive() || (owner{me.pid, me.start + 1}).alive() {
		t.Errorf("this process %v (%v): alive %v; with another start time alive %v", me, err, me.alive(), owner{me.pid, me.start + 1}.alive())
	}
}

// TestSweepDeadOwner: a bed whose maker has ended (here: this pid with
// another start time, as when the pid is used again) is removed by the
// next bed; a live one is not.
func TestSweepDeadOwner(t *testing.T) {
	me, err := selfOwner()
	if err != nil {
		t.Fatal(err)
	}
	dead, err := open(2, owner{me.pid, me.start + 1})
	if errors.Is(err, ErrUnavailable) && os.Getenv(envRequire) != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dead.Close() })
	live, err := Open(1)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	next, err := Open(1) // sweeps
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	nss, err := namespaces()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, n := range nss {
		names[n] = true
	}
	for _, m := range dead.machines {
		if names[m.ns] {
			t.Errorf("the dead owner's namespace %s is left", m.ns)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + dead.bridge); err == nil {
		t.Errorf("the dead owner's bridge %s is left", dead.bridge)
	}
	if !names[live.machines[0].ns] {
		t.Errorf("the live bed's namespace %s was swept", live.machines[0].ns)
	}
	if _, err := os.Stat("/sys/class/net/" + live.bridge); err != nil {
		t.Errorf("the live bed's bridge %s was swept", live.bridge)
	}
}

// FuzzIPOutput: what ip prints (routes, addresses) and the names a bed
// reads back never panic the parsers, and a subnet picked from them
// overlaps none of what they found.
func FuzzIPOutput(f *testing.F) {
	f.Add("default via 192.0.2.1 dev eth0\n10.231.0.0/24 dev gtbx-1 scope link\nlocal 10.231.1.1 dev lo table local\n",
		"2: eth0    inet 10.231.2.2/16 brd 10.231.255.255 scope global eth0\n", "goffload-tb-1-2-3-4")
	f.Add("unreachable 10.231.0.0/17\n", "inet 10.231.200.1/32\n", "goffload-tb--")
	f.Fuzz(func(t *testing.T, routes, addrs, id string) {
		parseID(id)
		taken := append(routePrefixes(routes), addrPrefixes(addrs)...)
		p, err := pickSubnet(taken)
		if err != nil {
			return
		}
		for _, q := range taken {
			if q.Bits() > 0 && q.Overlaps(p) {
				t.Fatalf("picked %v, which %v overlaps", p, q)
			}
		}
	})
}
