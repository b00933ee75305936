/* A FAKE libnvidia-ml.so.1 for tests: this machine has no GPU, and Ray's reporter agent reads
 * GPUs only through NVML. It answers the calls Ray 2.60's NvidiaGpuProvider makes.
 *
 * The GPUs a process sees are read, at every call, from the file
 * $RAYLAB_FAKE_NVML_DIR/$RAYLAB_NODE ("head", "worker-1", ... on the local backend;
 * "default" where RAYLAB_NODE is not set, as in a pod): one line per GPU,
 * "<utilization %> <memory used MiB> <memory total MiB>". No file: no GPUs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned int index; } fake_device;

#define MAX_GPUS 16
static fake_device devices[MAX_GPUS];
static double util[MAX_GPUS], used[MAX_GPUS], total[MAX_GPUS];

static unsigned int load(void) {
    const char *dir = getenv("RAYLAB_FAKE_NVML_DIR"), *node = getenv("RAYLAB_NODE");
    char path[4096];
    unsigned int n = 0;
    if (!dir) return 0;
    if (!node) node = "default";
    snprintf(path, sizeof path, "%s/%s", dir, node);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    while (n < MAX_GPUS && fscanf(f, "%lf %lf %lf", &util[n], &used[n], &total[n]) == 3) n++;
    fclose(f);
    return n;
}

int nvmlInit_v2(void) { return 0; }
int nvmlInitWithFlags(unsigned int flags) { (void)flags; return 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int result) { (void)result; return "fake NVML error"; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = load(); return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, fake_device **handle) {
    if (i >= MAX_GPUS) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    devices[i].index = i;
    *handle = &devices[i];
    return 0;
}
int nvmlDeviceGetName(fake_device *d, char *name, unsigned int len) {
    snprintf(name, len, "Fake GPU %u", d->index);
    return 0;
}
int nvmlDeviceGetUUID(fake_device *d, char *uuid, unsigned int len) {
    snprintf(uuid, len, "GPU-fake-%s-%u", getenv("RAYLAB_NODE") ? getenv("RAYLAB_NODE") : "", d->index);
    return 0;
}
int nvmlDeviceGetMigMode(fake_device *d, unsigned int *cur, unsigned int *pending) {
    (void)d; (void)cur; (void)pending;
    return 3; /* NVML_ERROR_NOT_SUPPORTED */
}
int nvmlDeviceGetMemoryInfo(fake_device *d, nvmlMemory_t *m) {
    load();
    m->total = (unsigned long long)(total[d->index] * 1048576.0);
    m->used = (unsigned long long)(used[d->index] * 1048576.0);
    m->free = m->total > m->used ? m->total - m->used : 0;
    return 0;
}
int nvmlDeviceGetUtilizationRates(fake_device *d, nvmlUtilization_t *u) {
    load();
    u->gpu = (unsigned int)util[d->index];
    u->memory = 0;
    return 0;
}
int nvmlDeviceGetComputeRunningProcesses_v3(fake_device *d, unsigned int *count, void *infos) {
    (void)d; (void)infos; *count = 0; return 0;
}
int nvmlDeviceGetGraphicsRunningProcesses_v3(fake_device *d, unsigned int *count, void *infos) {
    (void)d; (void)infos; *count = 0; return 0;
}
