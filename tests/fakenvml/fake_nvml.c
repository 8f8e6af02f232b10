/*
 * A fake libnvidia-ml.so.1 for tests on machines without a GPU.
 *
 * pynvml (nvidia-ml-py) loads "libnvidia-ml.so.1" by name with ctypes.CDLL and looks every
 * entry point up with dlsym, so this library on LD_LIBRARY_PATH stands in for the driver. It
 * implements the entry points (and the struct layouts) pynvml 13.x uses for what
 * hangdoctor/collect/nvml.py calls, plus the older names older pynvml releases use.
 *
 * Behaviour is chosen at run time by environment variables:
 *   FAKE_NVML_SCENARIO  h200x2-nccl-wait (default) | h200x2-busy | h200x2-idle-loaded |
 *                       lost-gpu | unsupported-field | missing-function | vanished-pid |
 *                       block | block-init | driver-not-loaded
 *   FAKE_NVML_PIDS      comma-separated pids; the k-th pid is placed on GPU k % 2
 *
 * "missing-function" needs a library built with -DFAKE_NVML_OLD_DRIVER (build.py's
 * "missing-function" variant): symbols a newer driver has (clock event reasons, remapped rows,
 * v3 process lists, memory info v2) are then absent, like on an old driver, so pynvml raises
 * NVMLError_FunctionNotFound for them.
 *
 * "block" and "block-init" sleep in a bounded loop (10 minutes) so deadline tests can see a
 * call that does not return; the test process abandons the thread and exits.
 */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>

typedef int nvmlReturn_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_UNKNOWN 999

#define EXPORT __attribute__((visibility("default")))

#define N_GPUS 2
#define MIB 1048576ULL
#define MAX_PIDS 16

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

#define NVML_MEMORY_V2_VERSION (unsigned int)(sizeof(nvmlMemory_v2_t) | (2 << 24))
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define RESERVED_BYTES (614ULL * MIB)

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

/* nvmlProcessInfo_v2_t == nvmlProcessInfo_t (v3) in NVML 12/13 headers */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    int index;
    const char *uuid;
    const char *bus_id;
    unsigned int bus;
    unsigned int util_gpu, util_mem;
    unsigned int power_mw;
    unsigned long long used_bytes;
    unsigned long long reasons;
} fake_gpu_t;

typedef fake_gpu_t *nvmlDevice_t;

static fake_gpu_t gpus[N_GPUS];
static unsigned int pids[MAX_PIDS];
static int n_pids;
static unsigned long long calls; /* makes power wobble a little between samples */

static const char *scenario(void) {
    const char *s = getenv("FAKE_NVML_SCENARIO");
    return (s && *s) ? s : "h200x2-nccl-wait";
}

static int is(const char *name) { return strcmp(scenario(), name) == 0; }

static void bounded_block(void) {
    /* a wedged driver call: never returns within any test's patience, but never forever */
    for (int i = 0; i < 600; i++) sleep(1);
}

static void setup(void) {
    static const char *uuids[N_GPUS] = {"GPU-6a0c1f3e-0000-4000-8000-000000000000",
                                        "GPU-6a0c1f3e-0000-4000-8000-000000000001"};
    static const char *bus_ids[N_GPUS] = {"00000000:19:00.0", "00000000:3B:00.0"};
    static const unsigned int buses[N_GPUS] = {0x19, 0x3B};
    for (int i = 0; i < N_GPUS; i++) {
        fake_gpu_t *g = &gpus[i];
        g->index = i;
        g->uuid = uuids[i];
        g->bus_id = bus_ids[i];
        g->bus = buses[i];
        g->used_bytes = 20 * 1024 * MIB + 530 * MIB; /* 20 GiB of weights + CUDA context */
        g->util_mem = 0;
        g->reasons = 0;
        if (is("h200x2-busy")) {
            g->util_gpu = 100;
            g->util_mem = 63;
            g->power_mw = 615000 + 3000 * i;
            g->reasons = 0x4; /* sw power cap */
        } else if (is("h200x2-idle-loaded")) {
            g->util_gpu = 0;
            g->power_mw = 117000 + 500 * i;
            g->reasons = 0x1; /* idle */
        } else {
            /* nccl-wait: GPU0 spins in a NCCL kernel at idle power, GPU1's rank is parked */
            g->util_gpu = i == 0 ? 100 : 0;
            g->power_mw = i == 0 ? 119000 : 120000;
            g->reasons = i == 0 ? 0 : 0x1;
        }
    }
    n_pids = 0;
    const char *env = getenv("FAKE_NVML_PIDS");
    if (env) {
        char buf[512];
        strncpy(buf, env, sizeof buf - 1);
        buf[sizeof buf - 1] = 0;
        for (char *tok = strtok(buf, ","); tok && n_pids < MAX_PIDS; tok = strtok(NULL, ",")) {
            long v = strtol(tok, NULL, 10);
            if (v > 0) pids[n_pids++] = (unsigned int)v;
        }
    }
    if (is("vanished-pid") && n_pids < MAX_PIDS) {
        /* above any pid_max: this pid cannot exist */
        pids[n_pids++] = 4194303;
    }
}

/* common guard for device calls: NULL handle, lost GPU */
static nvmlReturn_t check(nvmlDevice_t d) {
    if (d == NULL || d < &gpus[0] || d > &gpus[N_GPUS - 1]) return NVML_ERROR_INVALID_ARGUMENT;
    if (is("lost-gpu") && d->index == 1) return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src) {
    if (dst == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

/* ---- init / system ---------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (is("driver-not-loaded")) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (is("block-init")) bounded_block();
    setup();
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int len) {
    return copy_str(version, len, "580.95.05");
}
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int len) {
    return copy_str(version, len, "13.580.95.05");
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = 13000;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = N_GPUS;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
    if (!dev || index >= N_GPUS) return NVML_ERROR_INVALID_ARGUMENT;
    *dev = &gpus[index];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *dev) {
    return nvmlDeviceGetHandleByIndex_v2(index, dev);
}

/* ---- static device info ----------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len) {
    nvmlReturn_t r = check(d);
    return r ? r : copy_str(name, len, "NVIDIA H200");
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len) {
    nvmlReturn_t r = check(d);
    return r ? r : copy_str(uuid, len, d->uuid);
}
static nvmlReturn_t pci_info(nvmlDevice_t d, nvmlPciInfo_t *p) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (!p) return NVML_ERROR_INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", d->bus);
    snprintf(p->busId, sizeof p->busId, "%s", d->bus_id);
    p->bus = d->bus;
    p->pciDeviceId = 0x233510DE;
    p->pciSubSystemId = 0x18BF10DE;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) { return pci_info(d, p); }
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) { return pci_info(d, p); }

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *limit_mw) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (is("unsupported-field")) return NVML_ERROR_NOT_SUPPORTED;
    *limit_mw = 700000;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter,
                                                unsigned long long *count) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    (void)type;
    (void)counter;
    *count = 0;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, int cause, unsigned int *count,
                                              unsigned long long *addresses) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    (void)cause;
    (void)addresses;
    /* Hopper retires rows, not pages */
    (void)count;
    return NVML_ERROR_NOT_SUPPORTED;
}
#ifndef FAKE_NVML_OLD_DRIVER
EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corr, unsigned int *unc,
                                              unsigned int *pending, unsigned int *failure) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    *corr = 0;
    *unc = 0;
    *pending = 0;
    *failure = 0;
    return NVML_SUCCESS;
}
#endif

/* ---- sampled device info ---------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (is("block")) bounded_block();
    u->gpu = d->util_gpu;
    u->memory = d->util_mem;
    return NVML_SUCCESS;
}
/* v1 counts the driver's reservation as used; v2 reports it apart (as nvidia-smi does) */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    m->total = 143771ULL * MIB;
    m->used = d->used_bytes + RESERVED_BYTES;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}
#ifndef FAKE_NVML_OLD_DRIVER
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (m->version != NVML_MEMORY_V2_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    m->total = 143771ULL * MIB;
    m->reserved = RESERVED_BYTES;
    m->used = d->used_bytes;
    m->free = m->total - m->reserved - m->used;
    return NVML_SUCCESS;
}
#endif
EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (is("unsupported-field")) return NVML_ERROR_NOT_SUPPORTED;
    *mw = d->power_mw + (unsigned int)((calls++ % 5) * 150);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    *mhz = type == 1 ? 1980 : 3201; /* SM : memory */
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t d, int *pstate) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    *pstate = 0;
    return NVML_SUCCESS;
}
#ifndef FAKE_NVML_OLD_DRIVER
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *rs) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    *rs = d->reasons;
    return NVML_SUCCESS;
}
#endif
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *rs) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    *rs = d->reasons;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned int *kbps) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (is("unsupported-field")) return NVML_ERROR_NOT_SUPPORTED;
    *kbps = counter == 0 ? 1200 : 800;
    return NVML_SUCCESS;
}

/* ---- processes -------------------------------------------------------------------- */

static nvmlReturn_t procs(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (int k = 0; k < n_pids; k++)
        if (k % N_GPUS == d->index) n++;
    if (n == 0) {
        *count = 0;
        return NVML_SUCCESS;
    }
    if (*count < n || infos == NULL) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int j = 0;
    for (int k = 0; k < n_pids; k++) {
        if (k % N_GPUS != d->index) continue;
        infos[j].pid = pids[k];
        infos[j].usedGpuMemory = d->used_bytes - 530 * MIB + 500 * MIB;
        infos[j].gpuInstanceId = 0xFFFFFFFF;
        infos[j].computeInstanceId = 0xFFFFFFFF;
        j++;
    }
    *count = n;
    return NVML_SUCCESS;
}
#ifndef FAKE_NVML_OLD_DRIVER
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    return procs(d, count, infos);
}
#endif
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    return procs(d, count, infos);
}
static nvmlReturn_t no_procs(nvmlDevice_t d, unsigned int *count) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}
#ifndef FAKE_NVML_OLD_DRIVER
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                             void *infos) {
    (void)infos;
    return no_procs(d, count);
}
#endif
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int *count,
                                                             void *infos) {
    (void)infos;
    return no_procs(d, count);
}
