package gpurt

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// The driver decides what a test checks: none (CI without the stand-in): the
// no-driver answers; the stand-in driver ("Fake GPU", no data moves): every call's
// path; a GPU: exact data as well. GPURT_REQUIRE_GPU=1 makes a GPU test's skip a failure.
func driver() string {
	n, _ := DeviceCount()
	if n == 0 {
		return "none"
	}
	if p, err := GetDeviceProperties(0); err == nil && p.Name == "Fake GPU" {
		return "stub"
	}
	return "gpu"
}

func skip(t *testing.T, gpuTest bool, reason string) {
	t.Helper()
	if gpuTest && os.Getenv("GPURT_REQUIRE_GPU") == "1" {
		t.Fatalf("GPURT_REQUIRE_GPU=1 but %s", reason)
	}
	t.Skip(reason)
}

func needDevice(t *testing.T) {
	t.Helper()
	if driver() == "none" {
		skip(t, true, "no CUDA driver here (the stand-in driver or a GPU runs this test)")
	}
}

func needGPU(t *testing.T) {
	t.Helper()
	if d := driver(); d != "gpu" {
		skip(t, true, fmt.Sprintf("needs a GPU (driver here: %s; the stand-in moves no data)", d))
	}
}

func status(err error) Status {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return Success
}

func allocated(t *testing.T) MemoryStats {
	t.Helper()
	st, err := GetMemoryStats(0)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestWithoutADriverCallsSaySo(t *testing.T) {
	if driver() != "none" {
		skip(t, false, "checks the answers without a driver; this machine has one")
	}
	if n, err := DeviceCount(); n != 0 || err != nil {
		t.Fatalf("DeviceCount() = %d, %v; want 0, nil", n, err)
	}
	_, err := NewStream(0, 0)
	if status(err) != NoDriver || !strings.Contains(err.Error(), "gpurt_stream_create") {
		t.Fatalf("NewStream without a driver: %v (status %v)", err, status(err))
	}
}

// Each goroutine's error carries its own call's message while others fail at once
// with other messages: the message is read on the failing call's OS thread.
func TestErrorsKeepTheirOwnMessageAcrossGoroutines(t *testing.T) {
	needDevice(t)
	stale := &Stream{owner: owner{handle: closedHandle(t)}}
	var wg sync.WaitGroup
	failures := make(chan string, 64)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			s, err := NewStream(0, 0)
			if err != nil {
				failures <- err.Error()
				return
			}
			defer s.Close()
			for i := 0; i < 300; i++ {
				var err error
				var want string
				var wantStatus Status
				if g%2 == 0 {
					_, err = Malloc(1<<50, s)
					want, wantStatus = "gpurt_malloc", OutOfMemory
				} else {
					err = stale.Synchronize()
					want, wantStatus = "gpurt_stream_synchronize", InvalidHandle
				}
				if status(err) != wantStatus || !strings.Contains(err.Error(), want) {
					failures <- fmt.Sprintf("goroutine %d: %v (status %v), want %v from %s", g, err, status(err), wantStatus, want)
					return
				}
				runtime.Gosched()
			}
		}(g)
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
}

// closedHandle is the handle of a stream that was created and destroyed.
func closedHandle(t *testing.T) unsafe.Pointer {
	s, err := NewStream(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := s.get()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestMisuseIsRefusedClearly(t *testing.T) {
	needDevice(t)
	s, err := NewStream(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Malloc(-1, s); status(err) != InvalidArgument {
		t.Errorf("negative size: %v", err)
	}
	b, err := Malloc(16, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CopyFromHost(make([]byte, 17)); status(err) != InvalidArgument {
		t.Errorf("a copy past the end: %v", err)
	}
	if err := b.Close(); err != nil || b.Close() != nil || b.Ptr() != 0 {
		t.Errorf("Close twice: %v", err)
	}
	if err := b.CopyFromHost(make([]byte, 4)); status(err) != InvalidHandle {
		t.Errorf("a copy into a closed buffer: %v", err)
	}
	if err := s.Close(); err != nil || s.Close() != nil {
		t.Errorf("Close twice: %v", err)
	}
	if err := s.Synchronize(); status(err) != InvalidHandle || !strings.Contains(err.Error(), "gpurt_stream_synchronize") {
		t.Errorf("a closed stream: %v", err)
	}
	if _, err := GetMemoryStats(99); status(err) != InvalidArgument {
		t.Errorf("device 99: %v", err)
	}
}

// 8 goroutines, each on its own stream, allocate and free at once; the statistics
// come out exact.
func TestGoroutinesOnTheirOwnStreamsKeepStatisticsExact(t *testing.T) {
	needDevice(t)
	before := allocated(t)
	const goroutines, rounds = 8, 400
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			s, err := NewStream(0, 0)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			var live []*DeviceBuffer
			for i := 0; i < rounds; i++ {
				b, err := Malloc(512*(1+(g*rounds+i)%97), s)
				if err != nil {
					errs <- err
					return
				}
				live = append(live, b)
				if i%3 == 2 {
					for _, b := range live {
						if err := b.Close(); err != nil {
							errs <- err
							return
						}
					}
					live = live[:0]
				}
			}
			for _, b := range live {
				b.Close()
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after := allocated(t)
	if after.AllocatedBytes.Current != before.AllocatedBytes.Current || after.Allocations.Current != before.Allocations.Current {
		t.Errorf("live after: %+v, before: %+v", after.AllocatedBytes, before.AllocatedBytes)
	}
	if got := after.Allocations.Allocated - before.Allocations.Allocated; got != goroutines*rounds {
		t.Errorf("%d allocations counted, want %d", got, goroutines*rounds)
	}
	if got := after.Allocations.Freed - before.Allocations.Freed; got != goroutines*rounds {
		t.Errorf("%d frees counted, want %d", got, goroutines*rounds)
	}
}

// Owners the program drops without Close are closed by their finalizers.
func TestTheCollectorAloneFreesDroppedOwners(t *testing.T) {
	needDevice(t)
	before := allocated(t)
	pinnedBefore, err := GetPinnedStats()
	if err != nil {
		t.Fatal(err)
	}
	func() {
		for i := 0; i < 50; i++ {
			s, err := NewStream(0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Malloc(4096*(i+1), s); err != nil {
				t.Fatal(err)
			}
			if _, err := NewEvent(0, true); err != nil {
				t.Fatal(err)
			}
			if _, err := MallocPinned(1000 + i); err != nil {
				t.Fatal(err)
			}
			if _, err := NewGenerator(0, uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
	}()
	if allocated(t).AllocatedBytes.Current == before.AllocatedBytes.Current {
		t.Fatal("the buffers were not counted")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		now := allocated(t)
		pinned, _ := GetPinnedStats()
		if now.AllocatedBytes.Current == before.AllocatedBytes.Current && pinned.AllocatedBytes.Current == pinnedBefore.AllocatedBytes.Current {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s of collections: device %d bytes (before %d), pinned %d (before %d)",
				now.AllocatedBytes.Current, before.AllocatedBytes.Current, pinned.AllocatedBytes.Current, pinnedBefore.AllocatedBytes.Current)
		}
	}
}

// A process that exits with live owners exits cleanly: no crash, no hang.
func TestExitWithLiveOwners(t *testing.T) {
	if os.Getenv("GPURT_GO_EXIT_HELPER") == "1" {
		s, _ := NewStream(0, 0)
		b, _ := Malloc(1<<20, s)
		p, _ := MallocPinned(1 << 20)
		pool, _ := NewMemPool(0)
		pb, _ := pool.Malloc(4096, s)
		fmt.Println("exiting with live owners", s != nil, b != nil, p != nil, pb != nil)
		os.Exit(0)
	}
	needDevice(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestExitWithLiveOwners$", "-test.v")
	cmd.Env = append(os.Environ(), "GPURT_GO_EXIT_HELPER=1")
	done := make(chan error, 1)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), "exiting with live owners true true true true") {
			t.Fatalf("the exiting process: %v\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the exiting process hangs\n%s", out.String())
	}
}

func TestMemPoolsCountAndRefuseToGoWhileUsed(t *testing.T) {
	needDevice(t)
	s, err := NewStream(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pool, err := NewMemPool(0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pool.Malloc(3<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	st, err := pool.Stats()
	if err != nil || st.AllocatedBytes.Current != 3<<20 || st.Allocations.Current != 1 {
		t.Fatalf("pool stats %+v, %v", st.AllocatedBytes, err)
	}
	if err := pool.Close(); status(err) != InvalidArgument {
		t.Fatalf("closing a pool with a live buffer: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Close(); err != nil {
		t.Fatalf("closing an empty pool: %v", err)
	}
}

// Events order two streams and time work; graphs capture and replay.
func TestEventsAndGraphs(t *testing.T) {
	needDevice(t)
	a, _ := NewStream(0, 0)
	b, _ := NewStream(0, 0)
	defer a.Close()
	defer b.Close()
	start, err := NewEvent(0, true)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := NewEvent(0, true)
	if err := start.Record(a); err != nil {
		t.Fatal(err)
	}
	if err := end.Record(a); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEvent(end); err != nil {
		t.Fatal(err)
	}
	if err := end.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if ms, err := start.ElapsedTime(end); err != nil || ms < 0 {
		t.Fatalf("elapsed %v, %v", ms, err)
	}
	gen, err := NewGenerator(0, 42)
	if err != nil {
		t.Fatal(err)
	}
	buf, err := Malloc(4096, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.BeginCapture(CaptureRelaxed); err != nil {
		t.Fatal(err)
	}
	if err := gen.Uniform(buf, 1024); err != nil {
		if status(err) != NotSupported || driver() == "gpu" {
			t.Fatal(err)
		}
		t.Logf("no random fill in the graph: %v", err) // NVRTC is absent beside the stand-in driver
	}
	scratch, err := Malloc(1<<16, a) // from the graph's private pool
	if err != nil {
		t.Fatal(err)
	}
	graph, err := a.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	exec, err := graph.Instantiate(a)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := exec.Launch(a); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []interface{ Close() error }{scratch, exec, graph, gen, buf, start, end} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// On a GPU: fresh random bytes go to device memory and back exactly, directly and
// through pinned memory; a seeded generator repeats its numbers, all in [0, 1).
func TestDataRoundTripsExactly(t *testing.T) {
	needGPU(t)
	s, err := NewStream(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, n := range []int{1, 4095, 4097, 8<<20 + 3} {
		data := make([]byte, n)
		rand.Read(data)
		b, err := Malloc(n, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.CopyFromHost(data); err != nil {
			t.Fatal(err)
		}
		back := make([]byte, n)
		if err := b.CopyToHost(back); err != nil {
			t.Fatal(err)
		}
		pinned, err := MallocPinned(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.CopyToHost(pinned.Bytes()); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, data) || !bytes.Equal(pinned.Bytes(), data) {
			t.Fatalf("%d bytes did not round-trip", n)
		}
		b.Close()
		pinned.Close()
	}
	fill := func() []byte {
		g, err := NewGenerator(0, 1234)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		b, _ := Malloc(4*1000, s)
		defer b.Close()
		if err := g.Uniform(b, 1000); err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 4000)
		if err := b.CopyToHost(out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	first, second := fill(), fill()
	if !bytes.Equal(first, second) {
		t.Fatal("the same seed gave other numbers")
	}
	values := unsafe.Slice((*float32)(unsafe.Pointer(&first[0])), 1000)
	distinct := map[float32]bool{}
	for _, v := range values {
		if !(v >= 0 && v < 1) || math.IsNaN(float64(v)) {
			t.Fatalf("uniform value %v outside [0, 1)", v)
		}
		distinct[v] = true
	}
	if len(distinct) < 990 {
		t.Fatalf("only %d distinct values of 1000", len(distinct))
	}
}

// BenchmarkAllocFree: an alloc+free pair of 4 KiB through Go, beside the same
// pair made from C (docs/performance.md has the figures).
func BenchmarkAllocFree(b *testing.B) {
	if driver() == "none" {
		b.Skip("no CUDA driver here")
	}
	s, err := NewStream(0, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.Run("go", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			buf, err := Malloc(4096, s)
			if err != nil {
				b.Fatal(err)
			}
			buf.Close()
		}
	})
	b.Run("c", func(b *testing.B) {
		ns, err := cAllocFreePairs(b.N, 4096, s)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(ns)/float64(b.N), "ns/pair")
	})
}
