package org.gpurt;

/**
 * An alloc+free pair of 4 KiB through the Java package (DeviceBuffer.allocate, then
 * close), the median of 5 runs of 200 000 pairs after a warm-up. The same pair made
 * from C is the Go package's BenchmarkAllocFree/c on the same machine.
 */
public final class AllocFreeBench {
    public static void main(String[] args) {
        if (Gpurt.deviceCount() == 0) {
            System.out.println("AllocFreeBench: skipped (no CUDA driver here)");
            return;
        }
        int pairs = 200_000;
        double[] ns = new double[5];
        try (Stream s = Stream.create(0, 0)) {
            for (int i = 0; i < pairs; i++) DeviceBuffer.allocate(4096, s).close(); // warm-up: JIT and the pool
            for (int r = 0; r < ns.length; r++) {
                long t0 = System.nanoTime();
                for (int i = 0; i < pairs; i++) DeviceBuffer.allocate(4096, s).close();
                ns[r] = (System.nanoTime() - t0) / (double) pairs;
            }
        }
        java.util.Arrays.sort(ns);
        System.out.printf("AllocFreeBench: a 4 KiB alloc+free pair through Java: %.1f ns (median of 5 runs of %d; range %.1f-%.1f)%n", ns[2], pairs, ns[0],
                ns[4]);
    }
}
