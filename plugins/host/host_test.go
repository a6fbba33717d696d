package host_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
	"github.com/goffload/offload/plugins/host"
)

var testConfig = host.Config{Cores: 2, PoolThreshold: 1 << 20}

func TestConformance(t *testing.T) {
	plugintest.Run(t, func(t *testing.T) []plugin.Device {
		return []plugin.Device{host.New(testConfig), host.New(testConfig)}
	})
}

// TestConformanceShared runs the suite on devices that share the host's
// memory (GOFFLOAD_HOST_MEMORY=shared): their Alloc memory is still their
// own, and the suite checks what their plugin.HostSharer promises.
func TestConformanceShared(t *testing.T) {
	cfg := testConfig
	cfg.Shared = true
	plugintest.Run(t, func(t *testing.T) []plugin.Device {
		return []plugin.Device{host.New(cfg), host.New(cfg)}
	})
}

// TestConformanceOneCore runs the suite on single-core devices, where a
// kernel's parallel loop runs on one goroutine.
func TestConformanceOneCore(t *testing.T) {
	cfg := host.Config{Cores: 1}
	plugintest.Run(t, func(t *testing.T) []plugin.Device {
		return []plugin.Device{host.New(cfg), host.New(cfg), host.New(cfg)}
	})
}

func newLoaded(t testing.TB, cfg host.Config) plugin.Device {
	t.Helper()
	d := host.New(cfg)
	t.Cleanup(func() { d.Close() })
	if err := d.Load(entries.Current(), 0); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPoolReusesFreedBlock(t *testing.T) {
	d := newLoaded(t, testConfig)
	const n = 4096
	p, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Free(p); err != nil {
		t.Fatal(err)
	}
	pooled, _, inUse := host.PoolStats(d)
	if pooled != n || inUse != 0 {
		t.Fatalf("after freeing %d bytes: pooled %d, in use %d; want %d, 0", n, pooled, inUse, n)
	}
	p2, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if p2 != p {
		t.Errorf("Alloc after Free of the same size = %#x, want the pooled block %#x", uint64(p2), uint64(p))
	}
	if pooled, _, inUse := host.PoolStats(d); pooled != 0 || inUse != n {
		t.Errorf("after reuse: pooled %d, in use %d; want 0, %d", pooled, inUse, n)
	}
	// A block of another size class is not handed out for it.
	p3, err := d.Alloc(3 * n)
	if err != nil {
		t.Fatal(err)
	}
	if p3 == p {
		t.Errorf("Alloc(%d) reused a block of %d bytes", 3*n, n)
	}
	// The reused block holds what is written to it.
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i * 7)
	}
	got := make([]byte, n)
	if err := q.Submit(p2, want); err != nil {
		t.Fatal(err)
	}
	if err := q.Retrieve(got, p2); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("reused block: byte %d = %d, want %d", i, got[i], want[i])
		}
	}
}

func TestPoolBounded(t *testing.T) {
	// Blocks above the threshold are never pooled.
	d := newLoaded(t, testConfig)
	const big = 64 << 20
	for i := 0; i < 4; i++ {
		p, err := d.Alloc(big)
		if err != nil {
			t.Fatalf("round %d: Alloc(64 MiB): %v", i, err)
		}
		if err := d.Free(p); err != nil {
			t.Fatalf("round %d: Free: %v", i, err)
		}
		if pooled, _, inUse := host.PoolStats(d); pooled != 0 || inUse != 0 {
			t.Fatalf("round %d: 64 MiB above a 1 MiB threshold: pooled %d, in use %d; want 0, 0", i, pooled, inUse)
		}
	}

	// Under a threshold that admits the blocks, the pool keeps at most its
	// limit, and repeated alloc/free reuses instead of growing.
	d = newLoaded(t, host.Config{Cores: 2, PoolThreshold: big})
	var ptrs []plugin.Ptr
	for i := 0; i < 5; i++ {
		p, err := d.Alloc(big)
		if err != nil {
			t.Fatalf("Alloc(64 MiB) #%d: %v", i, err)
		}
		ptrs = append(ptrs, p)
	}
	for _, p := range ptrs {
		if err := d.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	pooled, limit, _ := host.PoolStats(d)
	if limit != 4*big || pooled != limit {
		t.Errorf("after freeing 5 x 64 MiB: pooled %d, limit %d; want both %d", pooled, limit, 4*big)
	}
	seen := map[plugin.Ptr]bool{}
	for _, p := range ptrs {
		seen[p] = true
	}
	for i := 0; i < 8; i++ {
		p, err := d.Alloc(big)
		if err != nil {
			t.Fatalf("round %d: Alloc: %v", i, err)
		}
		if !seen[p] {
			t.Errorf("round %d: Alloc(64 MiB) = %#x, not a pooled block", i, uint64(p))
		}
		if err := d.Free(p); err != nil {
			t.Fatal(err)
		}
		if pooled, limit, inUse := host.PoolStats(d); pooled != limit || inUse != 0 {
			t.Errorf("round %d: pooled %d (limit %d), in use %d", i, pooled, limit, inUse)
		}
	}
	// Close drops the pool.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if pooled, _, inUse := host.PoolStats(d); pooled != 0 || inUse != 0 {
		t.Errorf("after Close: pooled %d, in use %d; want 0, 0", pooled, inUse)
	}
}

// TestAllocMoreThanMachine checks that asking for more memory than the
// machine has is an error, not a fatal out-of-memory crash of the process.
func TestAllocMoreThanMachine(t *testing.T) {
	d := newLoaded(t, testConfig)
	mem := d.Info().Memory
	if mem <= 0 {
		t.Fatalf("Info().Memory = %d, want the machine's memory", mem)
	}
	for _, n := range []int64{mem + 1<<30, 2 * mem, 1 << 40} {
		if p, err := d.Alloc(n); !errors.Is(err, plugin.ErrOutOfMemory) {
			t.Errorf("Alloc(%d) on a machine with %d bytes = %#x, %v; want an error wrapping ErrOutOfMemory", n, mem, uint64(p), err)
		}
	}
	// The device still allocates.
	p, err := d.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Free(p); err != nil {
		t.Fatal(err)
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Run("Defaults", func(t *testing.T) {
		t.Setenv("GOFFLOAD_HOST_CORES", "")
		t.Setenv("GOFFLOAD_HOST_POOL_THRESHOLD", "")
		t.Setenv("GOFFLOAD_HOST_MEMORY", "")
		cfg, err := host.ConfigFromEnv()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Cores < 1 || cfg.PoolThreshold != host.DefaultPoolThreshold {
			t.Errorf("defaults: %+v, want Cores >= 1 and PoolThreshold %d", cfg, host.DefaultPoolThreshold)
		}
	})
	t.Run("Set", func(t *testing.T) {
		t.Setenv("GOFFLOAD_HOST_CORES", "3")
		t.Setenv("GOFFLOAD_HOST_POOL_THRESHOLD", "0")
		t.Setenv("GOFFLOAD_HOST_MEMORY", "")
		cfg, err := host.ConfigFromEnv()
		if err != nil {
			t.Fatal(err)
		}
		if cfg != (host.Config{Cores: 3, PoolThreshold: 0}) {
			t.Errorf("got %+v, want {Cores:3 PoolThreshold:0}", cfg)
		}
		t.Setenv("GOFFLOAD_HOST_POOL_THRESHOLD", "1048576")
		if cfg, err := host.ConfigFromEnv(); err != nil || cfg.PoolThreshold != 1<<20 {
			t.Errorf("threshold 1048576: %+v, %v", cfg, err)
		}
		// The kind opens devices with it.
		k, ok := plugin.LookupKind("host")
		if !ok {
			t.Fatal("host kind not registered")
		}
		devs, err := k.Open("2")
		if err != nil {
			t.Fatal(err)
		}
		if len(devs) != 2 {
			t.Errorf("host:2 opened %d devices", len(devs))
		}
		for _, d := range devs {
			if c := d.Info().Cores; c != 3 {
				t.Errorf("device from host:2 with GOFFLOAD_HOST_CORES=3 has %d cores", c)
			}
			d.Close()
		}
	})
	t.Run("Memory", func(t *testing.T) {
		t.Setenv("GOFFLOAD_HOST_CORES", "")
		t.Setenv("GOFFLOAD_HOST_POOL_THRESHOLD", "")
		for s, want := range map[string]bool{"": false, "separate": false, "shared": true} {
			t.Setenv("GOFFLOAD_HOST_MEMORY", s)
			cfg, err := host.ConfigFromEnv()
			if err != nil || cfg.Shared != want {
				t.Errorf("GOFFLOAD_HOST_MEMORY=%q: %+v, %v; want Shared %v", s, cfg, err, want)
			}
			k, _ := plugin.LookupKind("host")
			devs, err := k.Open("1")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := devs[0].(plugin.HostSharer); ok != want {
				t.Errorf("GOFFLOAD_HOST_MEMORY=%q: device is a HostSharer: %v, want %v", s, ok, want)
			}
			devs[0].Close()
		}
		t.Setenv("GOFFLOAD_HOST_MEMORY", "unified")
		if _, err := host.ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), `GOFFLOAD_HOST_MEMORY="unified"`) {
			t.Errorf("GOFFLOAD_HOST_MEMORY=unified: %v, want an error naming the variable and the value", err)
		}
	})
	for _, c := range []struct{ name, cores, threshold string }{
		{"CoresZero", "0", ""},
		{"CoresNegative", "-2", ""},
		{"CoresNotNumber", "two", ""},
		{"CoresFloat", "1.5", ""},
		{"CoresTooMany", "1000000", ""},
		{"ThresholdNegative", "", "-1"},
		{"ThresholdNotNumber", "", "1MiB"},
		{"ThresholdOverflow", "", "99999999999999999999"},
		{"ThresholdMoreThanMachine", "", "1152921504606846976"},
	} {
		t.Run("Bad"+c.name, func(t *testing.T) {
			t.Setenv("GOFFLOAD_HOST_CORES", c.cores)
			t.Setenv("GOFFLOAD_HOST_POOL_THRESHOLD", c.threshold)
			cfg, err := host.ConfigFromEnv()
			if err == nil {
				t.Errorf("CORES=%q THRESHOLD=%q: got %+v, nil; want an error", c.cores, c.threshold, cfg)
			} else if msg := err.Error(); !strings.Contains(msg, "GOFFLOAD_HOST_") || !strings.Contains(msg, " from ") {
				t.Errorf("CORES=%q THRESHOLD=%q: %q does not name the variable and the range", c.cores, c.threshold, msg)
			}
			k, _ := plugin.LookupKind("host")
			if _, err := k.Open("1"); !errors.Is(err, plugin.ErrBadSpec) {
				t.Errorf("Open with a bad environment = %v, want ErrBadSpec", err)
			}
		})
	}
}
