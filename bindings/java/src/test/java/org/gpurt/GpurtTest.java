package org.gpurt;

import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;

/**
 * The Java package's tests, run by the README's test command without a driver and
 * on the stand-in driver (a GPU adds exact data checks). A plain runner: each test
 * passes, fails or is skipped with its reason; the last line counts them.
 * GPURT_REQUIRE_GPU=1 makes a GPU test's skip a failure.
 */
public final class GpurtTest {
    private static int passed, failed, skipped;

    static final class Skip extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Skip(String why) {
            super(why);
        }
    }

    interface Body {
        void run() throws Exception;
    }

    static void test(String name, Body body) {
        try {
            body.run();
            passed++;
            System.out.println("PASS " + name);
        } catch (Skip s) {
            skipped++;
            System.out.println("SKIP " + name + ": " + s.getMessage());
        } catch (Throwable t) {
            failed++;
            System.out.println("FAIL " + name + ": " + t);
            t.printStackTrace(System.out);
        }
    }

    static void check(boolean condition, String what) {
        if (!condition) throw new AssertionError(what);
    }

    static String driver() {
        if (Gpurt.deviceCount() == 0) return "none";
        return Gpurt.deviceName(0).equals("Fake GPU") ? "stub" : "gpu";
    }

    static void needDevice() {
        if (driver().equals("none")) skipGpu("no CUDA driver here (the stand-in driver or a GPU runs this test)");
    }

    static void needGpu() {
        String d = driver();
        if (!d.equals("gpu")) skipGpu("needs a GPU (driver here: " + d + "; the stand-in moves no data)");
    }

    static void skipGpu(String why) {
        if ("1".equals(System.getenv("GPURT_REQUIRE_GPU"))) throw new AssertionError("GPURT_REQUIRE_GPU=1 but " + why);
        throw new Skip(why);
    }

    static int statusOf(Runnable r) {
        try {
            r.run();
            return 0;
        } catch (GpurtException e) {
            return e.status();
        }
    }

    static GpurtException errorOf(Runnable r) {
        try {
            r.run();
        } catch (GpurtException e) {
            return e;
        }
        throw new AssertionError("no error");
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 1 && args[0].equals("exit-with-live-owners")) {
            Stream s = Stream.create(0, 0);
            DeviceBuffer b = DeviceBuffer.allocate(1 << 20, s);
            PinnedBuffer p = PinnedBuffer.allocate(1 << 20);
            MemPool pool = MemPool.create(0);
            DeviceBuffer pb = pool.allocate(4096, s);
            System.out.println("exiting with live owners " + (b.size() + p.size() + pb.size()));
            System.exit(0);
        }

        test("without a driver, calls say so", () -> {
            if (!driver().equals("none")) throw new Skip("checks the answers without a driver; this machine has one");
            GpurtException e = errorOf(() -> Stream.create(0, 0));
            check(e.status() == GpurtException.NO_DRIVER && e.getMessage().contains("gpurt_stream_create"), e.toString());
        });

        test("misuse is refused clearly", () -> {
            needDevice();
            Stream s = Stream.create(0, 0);
            check(statusOf(() -> DeviceBuffer.allocate(-1, s)) == GpurtException.INVALID_ARGUMENT, "negative size");
            DeviceBuffer b = DeviceBuffer.allocate(16, s);
            check(statusOf(() -> b.copyFromHost(new byte[17])) == GpurtException.INVALID_ARGUMENT, "a copy past the end");
            b.close();
            b.close();
            check(statusOf(() -> b.copyFromHost(new byte[4])) == GpurtException.INVALID_HANDLE, "a closed buffer");
            s.close();
            GpurtException e = errorOf(s::synchronize);
            check(e.status() == GpurtException.INVALID_HANDLE, e.toString());
            check(statusOf(() -> Gpurt.memoryStats(99)) == GpurtException.INVALID_ARGUMENT, "device 99");
        });

        test("errors keep their own message across threads", () -> {
            needDevice();
            ConcurrentLinkedQueue<String> problems = new ConcurrentLinkedQueue<>();
            List<Thread> threads = new ArrayList<>();
            for (int t = 0; t < 16; t++) {
                final int id = t;
                threads.add(new Thread(() -> {
                    try (Stream s = Stream.create(0, 0)) {
                        for (int i = 0; i < 300; i++) {
                            GpurtException e = id % 2 == 0 ? errorOf(() -> DeviceBuffer.allocate(1L << 50, s)) : errorOf(() -> Gpurt.memoryStats(99));
                            int want = id % 2 == 0 ? GpurtException.OUT_OF_MEMORY : GpurtException.INVALID_ARGUMENT;
                            String call = id % 2 == 0 ? "gpurt_malloc" : "gpurt_memory_stats";
                            if (e.status() != want || !e.getMessage().contains(call)) problems.add("thread " + id + ": " + e.getMessage());
                        }
                    }
                }));
            }
            threads.forEach(Thread::start);
            for (Thread t : threads) t.join();
            check(problems.isEmpty(), problems.toString());
        });

        test("8 threads on their own streams keep the statistics exact", () -> {
            needDevice();
            Gpurt.MemoryStats before = Gpurt.memoryStats(0);
            int threads = 8, rounds = 400;
            ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
            List<Thread> all = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                final int id = t;
                all.add(new Thread(() -> {
                    try (Stream s = Stream.create(0, 0)) {
                        List<DeviceBuffer> live = new ArrayList<>();
                        for (int i = 0; i < rounds; i++) {
                            live.add(DeviceBuffer.allocate(512L * (1 + (id * rounds + i) % 97), s));
                            if (i % 3 == 2) {
                                live.forEach(DeviceBuffer::close);
                                live.clear();
                            }
                        }
                        live.forEach(DeviceBuffer::close);
                    } catch (Throwable e) {
                        errors.add(e);
                    }
                }));
            }
            all.forEach(Thread::start);
            for (Thread t : all) t.join();
            check(errors.isEmpty(), errors.toString());
            Gpurt.MemoryStats after = Gpurt.memoryStats(0);
            check(after.allocatedBytes().current() == before.allocatedBytes().current(), "bytes live after: " + after.allocatedBytes());
            check(after.allocations().allocated() - before.allocations().allocated() == (long) threads * rounds, "allocations counted");
            check(after.allocations().freed() - before.allocations().freed() == (long) threads * rounds, "frees counted");
        });

        test("the Cleaner alone frees dropped owners", () -> {
            needDevice();
            long device = Gpurt.memoryStats(0).allocatedBytes().current();
            long pinned = Gpurt.pinnedStats().allocatedBytes().current();
            for (int i = 0; i < 50; i++) {
                Stream s = Stream.create(0, 0);
                DeviceBuffer.allocate(4096L * (i + 1), s);
                Event.create(0, true);
                PinnedBuffer.allocate(1000 + i);
                Generator.create(0, i);
            }
            check(Gpurt.memoryStats(0).allocatedBytes().current() > device, "the buffers were counted");
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (Gpurt.memoryStats(0).allocatedBytes().current() != device || Gpurt.pinnedStats().allocatedBytes().current() != pinned) {
                check(System.nanoTime() < deadline, "after 20 s of collections: " + Gpurt.memoryStats(0).allocatedBytes() + " / " + Gpurt.pinnedStats().allocatedBytes());
                System.gc();
                Thread.sleep(10);
            }
        });

        test("a process exits cleanly with live owners", () -> {
            needDevice();
            String java = System.getProperty("java.home") + "/bin/java";
            Process p = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
                    "-Djna.library.path=" + System.getProperty("jna.library.path", ""), GpurtTest.class.getName(), "exit-with-live-owners")
                    .redirectErrorStream(true).start();
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            try (InputStream in = p.getInputStream()) {
                in.transferTo(out);
            }
            check(p.waitFor(60, TimeUnit.SECONDS), "the exiting process hangs: " + out);
            check(p.exitValue() == 0 && out.toString().contains("exiting with live owners"), "exit " + p.exitValue() + ": " + out);
        });

        test("memory pools count and refuse to go while used", () -> {
            needDevice();
            try (Stream s = Stream.create(0, 0)) {
                MemPool pool = MemPool.create(0);
                DeviceBuffer b = pool.allocate(3 << 20, s);
                Gpurt.MemoryStats st = pool.stats();
                check(st.allocatedBytes().current() == 3 << 20 && st.allocations().current() == 1, st.toString());
                check(statusOf(pool::close) == GpurtException.INVALID_ARGUMENT, "closing a pool with a live buffer");
                b.close();
                pool.close();
                check(pool.isClosed(), "the empty pool closed");
            }
        });

        test("events order streams; graphs capture and replay", () -> {
            needDevice();
            try (Stream a = Stream.create(0, 0); Stream b = Stream.create(0, 0); Event start = Event.create(0, true); Event end = Event.create(0, true)) {
                start.record(a);
                end.record(a);
                b.waitEvent(end);
                end.synchronize();
                check(start.elapsedTime(end) >= 0, "elapsed time");
                check(a.nativeStream() != 0 && a.query(), "native stream, idle");
                try (Generator gen = Generator.create(0, 42); DeviceBuffer buf = DeviceBuffer.allocate(4096, a)) {
                    a.beginCapture(Stream.CAPTURE_RELAXED);
                    int st = statusOf(() -> gen.uniform(buf, 1024));
                    check(st == 0 || (st == GpurtException.NOT_SUPPORTED && !driver().equals("gpu")), "the fill: status " + st);
                    DeviceBuffer scratch = DeviceBuffer.allocate(1 << 16, a); // from the graph's private pool
                    try (Graph g = a.endCapture(); Graph.Exec exec = g.instantiate(a)) {
                        for (int i = 0; i < 3; i++) exec.launch(a);
                        a.synchronize();
                    }
                    scratch.close();
                }
            }
        });

        test("data round-trips exactly; a seed repeats its numbers", () -> {
            needGpu();
            SecureRandom random = new SecureRandom();
            try (Stream s = Stream.create(0, 0)) {
                for (int n : new int[] {1, 4095, 4097, (8 << 20) + 3}) {
                    byte[] data = new byte[n], back = new byte[n];
                    random.nextBytes(data);
                    try (DeviceBuffer b = DeviceBuffer.allocate(n, s); PinnedBuffer pinned = PinnedBuffer.allocate(n)) {
                        b.copyFromHost(data);
                        b.copyToHost(back);
                        b.copyToPinned(pinned);
                        byte[] viaPinned = new byte[n];
                        pinned.byteBuffer().get(viaPinned);
                        check(Arrays.equals(back, data) && Arrays.equals(viaPinned, data), n + " bytes round-trip");
                    }
                }
                float[] first = uniform(s), second = uniform(s);
                check(Arrays.equals(first, second), "the same seed, the same numbers");
                Set<Float> distinct = new HashSet<>();
                for (float v : first) {
                    check(v >= 0 && v < 1, "uniform value " + v);
                    distinct.add(v);
                }
                check(distinct.size() >= 990, distinct.size() + " distinct of 1000");
            }
        });

        System.out.println(passed + " passed, " + failed + " failed, " + skipped + " skipped");
        System.exit(failed == 0 ? 0 : 1);
    }

    static float[] uniform(Stream s) {
        try (Generator g = Generator.create(0, 1234); DeviceBuffer b = DeviceBuffer.allocate(4000, s)) {
            g.uniform(b, 1000);
            byte[] bytes = new byte[4000];
            b.copyToHost(bytes);
            FloatBuffer f = java.nio.ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
            float[] out = new float[1000];
            f.get(out);
            return out;
        }
    }
}
