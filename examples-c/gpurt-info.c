/* gpurt-info: prints every CUDA device gpurt sees, its properties, memory, NVML
 * telemetry and the peer-access matrix. Says plainly when there is no driver or no
 * device. `gpurt-info --watch [SECONDS]` prints each device's readings every second
 * (until interrupted, or for SECONDS seconds), like a small nvidia-smi;
 * `gpurt-info --memory` where this process's memory on each device is
 * (gpurt_memory_report): a bare context's, as a process that made nothing else. */
#define _POSIX_C_SOURCE 200809L
#include <gpurt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                              \
    do {                                                                         \
        gpurt_status_t s_ = (call);                                              \
        if (s_ != GPURT_SUCCESS) {                                               \
            fprintf(stderr, "%s failed: %s: %s\n", #call, gpurt_status_string(s_), \
                    gpurt_last_error_message());                                 \
            return 1;                                                            \
        }                                                                        \
    } while (0)

static void print_uuid(const uint8_t *u) {
    int i;
    printf("GPU-");
    for (i = 0; i < 16; i++) {
        printf("%02x", u[i]);
        if (i == 3 || i == 5 || i == 7 || i == 9) printf("-");
    }
}

/* NVML's readings, where NVML loads (else the reason, and no failure). */
static int print_telemetry(int d) {
    gpurt_telemetry_t t = GPURT_TELEMETRY_INIT;
    gpurt_process_t processes[16];
    size_t count = 0, i;
    gpurt_status_t s = gpurt_device_telemetry(d, &t);
    if (s == GPURT_ERROR_NOT_SUPPORTED) {
        printf("  telemetry                     none: %s\n", gpurt_last_error_message());
        return 0;
    }
    CHECK(s);
    printf("  memory used / total (NVML)    %llu / %llu bytes\n", (unsigned long long)t.memory_used, (unsigned long long)t.memory_total);
    printf("  utilization gpu / memory      %d / %d %%\n", t.gpu_utilization, t.memory_utilization);
    printf("  temperature                   %d C\n", t.temperature_c);
    printf("  power draw / limit            %lld / %lld mW\n", (long long)t.power_draw_mw, (long long)t.power_limit_mw);
    printf("  clocks sm / memory            %d / %d MHz\n", t.sm_clock_mhz, t.memory_clock_mhz);
    printf("  clock event reasons           %#llx\n", (unsigned long long)t.clock_event_reasons);
    CHECK(gpurt_device_processes(d, processes, 16, &count));
    printf("  compute processes             %zu\n", count);
    for (i = 0; i < count && i < 16; i++) {
        printf("    pid %u: %llu bytes\n", processes[i].pid, (unsigned long long)processes[i].used_bytes);
    }
    return 0;
}

static int print_device(int d) {
    gpurt_device_properties_t p = GPURT_DEVICE_PROPERTIES_INIT;
    int bf16 = 0;
    size_t free_bytes = 0, total_bytes = 0;
    CHECK(gpurt_device_get_properties(d, &p));
    CHECK(gpurt_mem_get_info(d, &free_bytes, &total_bytes));
    printf("device %d: %s\n", d, p.name);
    printf("  uuid                          ");
    print_uuid(p.uuid);
    printf("\n");
    printf("  pci domain:bus:device         %04x:%02x:%02x\n", p.pci_domain_id, p.pci_bus_id, p.pci_device_id);
    printf("  compute capability            %d.%d\n", p.major, p.minor);
    printf("  total memory                  %llu bytes (%.2f GiB)\n", (unsigned long long)p.total_memory,
           (double)p.total_memory / (1024.0 * 1024.0 * 1024.0));
    printf("  free / total (mem_get_info)   %zu / %zu bytes\n", free_bytes, total_bytes);
    printf("  multiprocessors               %d\n", p.multiprocessor_count);
    printf("  max threads per block / SM    %d / %d\n", p.max_threads_per_block, p.max_threads_per_multiprocessor);
    printf("  warp size                     %d\n", p.warp_size);
    printf("  max block dims                %d x %d x %d\n", p.max_block_dim[0], p.max_block_dim[1], p.max_block_dim[2]);
    printf("  max grid dims                 %d x %d x %d\n", p.max_grid_dim[0], p.max_grid_dim[1], p.max_grid_dim[2]);
    printf("  shared memory per block       %d (opt-in %d)\n", p.shared_memory_per_block, p.shared_memory_per_block_optin);
    printf("  shared memory per SM          %d\n", p.shared_memory_per_multiprocessor);
    printf("  registers per block / SM      %d / %d\n", p.registers_per_block, p.registers_per_multiprocessor);
    printf("  L2 cache / persisting max     %d / %d bytes\n", p.l2_cache_size, p.persisting_l2_cache_max_size);
    printf("  memory bus width              %d bits\n", p.memory_bus_width);
    printf("  clock / memory clock          %d / %d kHz\n", p.clock_rate_khz, p.memory_clock_rate_khz);
    printf("  integrated                    %d\n", p.integrated);
    printf("  can map host memory           %d\n", p.can_map_host_memory);
    printf("  unified addressing            %d\n", p.unified_addressing);
    printf("  managed memory / concurrent   %d / %d\n", p.managed_memory, p.concurrent_managed_access);
    printf("  pageable memory access        %d\n", p.pageable_memory_access);
    printf("  async engines                 %d\n", p.async_engine_count);
    printf("  compute mode                  %d\n", p.compute_mode);
    printf("  ECC enabled                   %d\n", p.ecc_enabled);
    printf("  memory pools supported        %d\n", p.memory_pools_supported);
    printf("  virtual memory management     %d\n", p.virtual_memory_management_supported);
    printf("  cooperative launch            %d\n", p.cooperative_launch);
    printf("  stream priorities             %d\n", p.stream_priorities_supported);
    printf("  tf32 supported                %d\n", p.tf32_supported);
    CHECK(gpurt_device_bf16_supported(d, &bf16));
    printf("  bf16 supported                %d\n", bf16);
    return print_telemetry(d);
}

static int watch(int count, int seconds) {
    const struct timespec second = {1, 0};
    int tick, d;
    for (tick = 0; seconds <= 0 || tick < seconds; tick++) {
        for (d = 0; d < count; d++) {
            gpurt_telemetry_t t = GPURT_TELEMETRY_INIT;
            gpurt_status_t s = gpurt_device_telemetry(d, &t);
            if (s != GPURT_SUCCESS) {
                printf("device %d: no telemetry: %s\n", d, gpurt_last_error_message());
                return s == GPURT_ERROR_NOT_SUPPORTED ? 0 : 1;
            }
            printf("device %d  gpu %3d%%  mem %3d%%  %7.0f / %7.0f MiB  %3d C  %6.1f / %6.1f W  sm %4d MHz  mem %4d MHz\n", d,
                   t.gpu_utilization, t.memory_utilization, t.memory_used / 1048576.0, t.memory_total / 1048576.0, t.temperature_c,
                   t.power_draw_mw / 1000.0, t.power_limit_mw / 1000.0, t.sm_clock_mhz, t.memory_clock_mhz);
        }
        fflush(stdout);
        nanosleep(&second, NULL);
    }
    return 0;
}

/* One figure of the memory report in MiB, or "unknown". */
static void print_figure(const char *name, uint64_t bytes) {
    if (bytes == GPURT_MEMORY_UNKNOWN)
        printf("  %-44s %12s\n", name, "unknown");
    else
        printf("  %-44s %12.1f MiB\n", name, bytes / 1048576.0);
}

static int print_memory(int count) {
    int d;
    for (d = 0; d < count; d++) {
        gpurt_memory_report_t r = GPURT_MEMORY_REPORT_INIT;
        CHECK(gpurt_memory_report(d, &r));
        printf("device %d memory, this process:\n", d);
        print_figure("device total", r.device_total);
        print_figure("device free (every process)", r.device_free);
        print_figure("this process (NVML)", r.process);
        print_figure("  context's local memory", r.local_memory);
        print_figure("  default pool reserved", r.default_pool_reserved);
        print_figure("    live", r.default_pool_live);
        print_figure("    math-library workspaces", r.math_workspaces);
        print_figure("    growable buffers mapped", r.vbuffers_mapped);
        print_figure("  user pools reserved", r.user_pools_reserved);
        print_figure("    live", r.user_pools_live);
        print_figure("  graph pools reserved", r.graph_pools_reserved);
        print_figure("    live", r.graph_pools_live);
        print_figure("  math-library handles", r.math_handles);
        print_figure("  modules", r.modules);
        print_figure("  NCCL communicators", r.communicators);
        print_figure("  unattributed (context, other libraries)", r.unattributed);
        print_figure("asleep: default pool", r.default_pool_asleep);
        print_figure("asleep: user pools", r.user_pools_asleep);
    }
    return 0;
}

/* The math libraries gpurt keeps handles of: loaded on first use, where installed. */
static void print_math_libraries(void) {
    static const char *names[] = {"cuBLAS", "cuBLASLt", "cuSOLVER", "cuSPARSE", "cuDNN"};
    int i, version;
    printf("math libraries:");
    for (i = 0; i < 5; i++) {
        if (gpurt_math_library_version((gpurt_math_library_t)i, &version) == GPURT_SUCCESS)
            printf("  %s %d.%d.%d", names[i], version / 10000, version / 100 % 100, version % 100);
        else
            printf("  %s absent", names[i]);
    }
    printf("\n");
}

int main(int argc, char **argv) {
    int available = 0, count = 0, version = 0, d, e;
    gpurt_status_t status;
    printf("gpurt %d.%d.%d (library %d)\n", GPURT_VERSION_MAJOR, GPURT_VERSION_MINOR, GPURT_VERSION_PATCH,
           gpurt_version());
    print_math_libraries();
    CHECK(gpurt_is_available(&available));
    CHECK(gpurt_device_count(&count));
    status = gpurt_driver_version(&version);
    if (status == GPURT_ERROR_NO_DRIVER) {
        printf("no CUDA driver: %s\n", gpurt_last_error_message());
        return 0;
    }
    CHECK(status);
    printf("CUDA driver %d.%d, %d device(s)\n", version / 1000, (version % 1000) / 10, count);
    if (count == 0) {
        printf("no CUDA device\n");
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--watch") == 0) return watch(count, argc > 2 ? atoi(argv[2]) : 0);
    if (argc > 1 && strcmp(argv[1], "--memory") == 0) return print_memory(count);
    for (d = 0; d < count; d++) {
        if (print_device(d) != 0) return 1;
    }
    printf("peer access (row can access column):\n     ");
    for (e = 0; e < count; e++) printf(" %3d", e);
    printf("\n");
    for (d = 0; d < count; d++) {
        printf("  %2d ", d);
        for (e = 0; e < count; e++) {
            int can = 0;
            if (d != e) CHECK(gpurt_device_can_access_peer(d, e, &can));
            printf(" %3s", d == e ? "-" : (can ? "yes" : "no"));
        }
        printf("\n");
    }
    return 0;
}
