/* smelt's Level Zero launcher for SPIR-V kernels (see levelzero.h for the contract). */
#include "levelzero.h"
#include "dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- The subset of the Level Zero core API used here ---------------------
 * Declared here (smelt does not need the Level Zero headers) from the oneAPI
 * Level Zero specification, core API. Every struct below copies the layout
 * (member order and types) of its ze_api.h namesake, checked member by
 * member (offsetof/sizeof) against ze_api.h "v1.4-r1.4.8" as shipped by
 * Debian's libze-dev 1.8.12; the stype values and enum values are that
 * header's. The header's enums are 4-byte (each has a *_FORCE_UINT32 =
 * 0x7fffffff member), so they are declared here as uint32_t. ZE_APICALL is
 * empty on Linux. */
typedef uint32_t ze_result_t;
typedef uint32_t ze_structure_type_t;
typedef uint32_t ze_device_type_t;
typedef uint32_t ze_api_version_t;
typedef struct _ze_driver_handle_t *ze_driver_handle_t;
typedef struct _ze_device_handle_t *ze_device_handle_t;
typedef struct _ze_context_handle_t *ze_context_handle_t;
typedef struct _ze_command_list_handle_t *ze_command_list_handle_t;
typedef struct _ze_event_handle_t *ze_event_handle_t;
typedef struct _ze_module_handle_t *ze_module_handle_t;
typedef struct _ze_module_build_log_handle_t *ze_module_build_log_handle_t;
typedef struct _ze_kernel_handle_t *ze_kernel_handle_t;

enum { /* ze_result_t */
    ZE_RESULT_SUCCESS = 0,
    ZE_RESULT_ERROR_UNINITIALIZED = 0x78000001,
};
enum { /* ze_structure_type_t */
    ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES = 0x3,
    ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES = 0x5,
    ZE_STRUCTURE_TYPE_DEVICE_MEMORY_ACCESS_PROPERTIES = 0x8,
    ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES = 0x6,
    ZE_STRUCTURE_TYPE_CONTEXT_DESC = 0xd,
    ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC = 0xe,
    ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC = 0x15,
    ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC = 0x16,
    ZE_STRUCTURE_TYPE_MODULE_DESC = 0x1b,
    ZE_STRUCTURE_TYPE_KERNEL_DESC = 0x1d,
    ZE_STRUCTURE_TYPE_KERNEL_PROPERTIES = 0x1e,
};
enum {
    ZE_INIT_FLAG_GPU_ONLY = 1 << 0,                        /* ze_init_flags_t */
    ZE_DEVICE_TYPE_GPU = 1,                                /* ze_device_type_t */
    ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE = 1 << 0, /* ze_command_queue_group_property_flags_t */
    ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS = 1,                 /* ze_command_queue_mode_t */
    ZE_COMMAND_QUEUE_PRIORITY_NORMAL = 0,                  /* ze_command_queue_priority_t */
    ZE_MODULE_FORMAT_IL_SPIRV = 0,                         /* ze_module_format_t */
};

typedef struct ze_device_properties_t {
    ze_structure_type_t stype;
    void *pNext;
    ze_device_type_t type;
    uint32_t vendorId;
    uint32_t deviceId;
    uint32_t flags; /* ze_device_property_flags_t */
    uint32_t subdeviceId;
    uint32_t coreClockRate;
    uint64_t maxMemAllocSize;
    uint32_t maxHardwareContexts;
    uint32_t maxCommandQueuePriority;
    uint32_t numThreadsPerEU;
    uint32_t physicalEUSimdWidth;
    uint32_t numEUsPerSubslice;
    uint32_t numSubslicesPerSlice;
    uint32_t numSlices;
    uint64_t timerResolution;
    uint32_t timestampValidBits;
    uint32_t kernelTimestampValidBits;
    uint8_t uuid[16]; /* ze_device_uuid_t: uint8_t id[ZE_MAX_DEVICE_UUID_SIZE = 16] */
    char name[256];   /* ZE_MAX_DEVICE_NAME */
} ze_device_properties_t;

typedef struct ze_command_queue_group_properties_t {
    ze_structure_type_t stype;
    void *pNext;
    uint32_t flags; /* ze_command_queue_group_property_flags_t */
    size_t maxMemoryFillPatternSize;
    uint32_t numQueues;
} ze_command_queue_group_properties_t;

typedef struct ze_context_desc_t {
    ze_structure_type_t stype;
    const void *pNext;
    uint32_t flags; /* ze_context_flags_t */
} ze_context_desc_t;

typedef struct ze_command_queue_desc_t {
    ze_structure_type_t stype;
    const void *pNext;
    uint32_t ordinal;
    uint32_t index;
    uint32_t flags;    /* ze_command_queue_flags_t */
    uint32_t mode;     /* ze_command_queue_mode_t */
    uint32_t priority; /* ze_command_queue_priority_t */
} ze_command_queue_desc_t;

typedef struct ze_module_desc_t {
    ze_structure_type_t stype;
    const void *pNext;
    uint32_t format; /* ze_module_format_t */
    size_t inputSize;
    const uint8_t *pInputModule;
    const char *pBuildFlags;
    const void *pConstants; /* const ze_module_constants_t * */
} ze_module_desc_t;

typedef struct ze_kernel_desc_t {
    ze_structure_type_t stype;
    const void *pNext;
    uint32_t flags; /* ze_kernel_flags_t */
    const char *pKernelName;
} ze_kernel_desc_t;

typedef struct ze_kernel_properties_t {
    ze_structure_type_t stype;
    void *pNext;
    uint32_t numKernelArgs;
    uint32_t requiredGroupSizeX;
    uint32_t requiredGroupSizeY;
    uint32_t requiredGroupSizeZ;
    uint32_t requiredNumSubGroups;
    uint32_t requiredSubgroupSize;
    uint32_t maxSubgroupSize;
    uint32_t maxNumSubgroups;
    uint32_t localMemSize;
    uint32_t privateMemSize;
    uint32_t spillMemSize;
    uint8_t uuid[32]; /* ze_kernel_uuid_t: uint8_t kid[16], mid[16] */
} ze_kernel_properties_t;

typedef struct ze_group_count_t {
    uint32_t groupCountX;
    uint32_t groupCountY;
    uint32_t groupCountZ;
} ze_group_count_t;

typedef struct ze_device_mem_alloc_desc_t {
    ze_structure_type_t stype;
    const void *pNext;
    uint32_t flags; /* ze_device_mem_alloc_flags_t */
    uint32_t ordinal;
} ze_device_mem_alloc_desc_t;

/* ze_device_memory_access_properties_t: five ze_memory_access_cap_flags_t. */
typedef struct ze_device_memory_access_properties_t {
    ze_structure_type_t stype;
    void *pNext;
    uint32_t hostAllocCapabilities, deviceAllocCapabilities, sharedSingleDeviceAllocCapabilities,
        sharedCrossDeviceAllocCapabilities, sharedSystemAllocCapabilities;
} ze_device_memory_access_properties_t;

/* ze_device_module_properties_t (nativeKernelSupported: ze_native_kernel_uuid_t, 16 bytes). */
typedef struct ze_device_module_properties_t {
    ze_structure_type_t stype;
    void *pNext;
    uint32_t spirvVersionSupported, flags, fp16flags, fp32flags, fp64flags, maxArgumentsSize, printfBufferSize;
    uint8_t nativeKernelSupported[16];
} ze_device_module_properties_t;

typedef struct ze_host_mem_alloc_desc_t {
    ze_structure_type_t stype;
    const void *pNext;
    uint32_t flags; /* ze_host_mem_alloc_flags_t */
} ze_host_mem_alloc_desc_t;

/* Return type, name, parameters of each entry point smelt resolves. */
#define ZE_FUNCS(X)                                                                                  \
    X(ze_result_t, zeInit, (uint32_t))                                                                \
    X(ze_result_t, zeDriverGet, (uint32_t *, ze_driver_handle_t *))                                   \
    X(ze_result_t, zeDriverGetApiVersion, (ze_driver_handle_t, ze_api_version_t *))                   \
    X(ze_result_t, zeDeviceGet, (ze_driver_handle_t, uint32_t *, ze_device_handle_t *))               \
    X(ze_result_t, zeDeviceGetProperties, (ze_device_handle_t, ze_device_properties_t *))             \
    X(ze_result_t, zeDeviceGetMemoryAccessProperties, (ze_device_handle_t, ze_device_memory_access_properties_t *)) \
    X(ze_result_t, zeDeviceGetModuleProperties, (ze_device_handle_t, ze_device_module_properties_t *)) \
    X(ze_result_t, zeDeviceGetCommandQueueGroupProperties,                                            \
      (ze_device_handle_t, uint32_t *, ze_command_queue_group_properties_t *))                        \
    X(ze_result_t, zeContextCreate, (ze_driver_handle_t, const ze_context_desc_t *, ze_context_handle_t *)) \
    X(ze_result_t, zeCommandListCreateImmediate,                                                      \
      (ze_context_handle_t, ze_device_handle_t, const ze_command_queue_desc_t *,                      \
       ze_command_list_handle_t *))                                                                   \
    X(ze_result_t, zeModuleCreate,                                                                    \
      (ze_context_handle_t, ze_device_handle_t, const ze_module_desc_t *, ze_module_handle_t *,       \
       ze_module_build_log_handle_t *))                                                               \
    X(ze_result_t, zeModuleDestroy, (ze_module_handle_t))                                             \
    X(ze_result_t, zeModuleBuildLogGetString, (ze_module_build_log_handle_t, size_t *, char *))       \
    X(ze_result_t, zeModuleBuildLogDestroy, (ze_module_build_log_handle_t))                           \
    X(ze_result_t, zeKernelCreate, (ze_module_handle_t, const ze_kernel_desc_t *, ze_kernel_handle_t *)) \
    X(ze_result_t, zeKernelDestroy, (ze_kernel_handle_t))                                             \
    X(ze_result_t, zeKernelGetProperties, (ze_kernel_handle_t, ze_kernel_properties_t *))             \
    X(ze_result_t, zeKernelSetGroupSize, (ze_kernel_handle_t, uint32_t, uint32_t, uint32_t))          \
    X(ze_result_t, zeKernelSetArgumentValue, (ze_kernel_handle_t, uint32_t, size_t, const void *))    \
    X(ze_result_t, zeCommandListAppendLaunchKernel,                                                   \
      (ze_command_list_handle_t, ze_kernel_handle_t, const ze_group_count_t *, ze_event_handle_t,     \
       uint32_t, ze_event_handle_t *))                                                                \
    X(ze_result_t, zeMemAllocShared,                                                                  \
      (ze_context_handle_t, const ze_device_mem_alloc_desc_t *, const ze_host_mem_alloc_desc_t *,     \
       size_t, size_t, ze_device_handle_t, void **))                                                  \
    X(ze_result_t, zeMemFree, (ze_context_handle_t, void *))
/* ---- end of the Level Zero subset ---- */

/* The names of the results a launcher is likely to meet (ze_api.h). */
#define ZE_ERRORS(X)                                                                               \
    X(0x70000001, DEVICE_LOST) X(0x70000002, OUT_OF_HOST_MEMORY) X(0x70000003, OUT_OF_DEVICE_MEMORY) \
    X(0x70000004, MODULE_BUILD_FAILURE) X(0x70000005, MODULE_LINK_FAILURE)                          \
    X(0x78000001, UNINITIALIZED) X(0x78000002, UNSUPPORTED_VERSION)                                 \
    X(0x78000003, UNSUPPORTED_FEATURE) X(0x78000004, INVALID_ARGUMENT)                              \
    X(0x78000005, INVALID_NULL_HANDLE) X(0x78000007, INVALID_NULL_POINTER)                          \
    X(0x78000008, INVALID_SIZE) X(0x78000009, UNSUPPORTED_SIZE) X(0x7800000a, UNSUPPORTED_ALIGNMENT) \
    X(0x7800000f, INVALID_NATIVE_BINARY) X(0x78000011, INVALID_KERNEL_NAME)                         \
    X(0x78000013, INVALID_GROUP_SIZE_DIMENSION) X(0x78000015, INVALID_KERNEL_ARGUMENT_INDEX)        \
    X(0x78000016, INVALID_KERNEL_ARGUMENT_SIZE) X(0x7ffffffe, UNKNOWN)

/* ---- The process's device, made once ------------------------------------ */

/* ok: the fields below it are usable; else why says what is missing.
 * list: a synchronous immediate command list on a compute queue group;
 * launch_mu serialises its use and the kernel-argument calls before it
 * (neither a command list nor a kernel may be used from two threads at
 * once). Written only by ze_init. */
static struct {
    int ok;
    char why[192];
    char text[320];
#define X(ret, name, params) ret(*name) params;
    ZE_FUNCS(X)
#undef X
    ze_driver_handle_t driver;
    ze_device_handle_t dev;
    ze_context_handle_t ctx;
    ze_command_list_handle_t list;
    pthread_mutex_t launch_mu;
    int fp64;   /* the device computes float64 (fp64flags non-zero) */
} ZE;
static pthread_once_t ze_once = PTHREAD_ONCE_INIT;

struct kern_ze_module {
    ze_module_handle_t mod;
};

/* nargs: the kernel's argument count; local: the group size last set on
 * it (0: none yet), read and written under ZE.launch_mu. */
struct kern_ze_kernel {
    ze_kernel_handle_t kern;
    uint32_t nargs;
    int64_t local;
    char name[64];
};

static const char *ze_err_name(ze_result_t r)
{
    switch (r) {
#define X(v, name) case v: return "ZE_RESULT_ERROR_" #name;
        ZE_ERRORS(X)
#undef X
    default:
        return "unknown";
    }
}

/* "<prefix><call> failed: 0x<code> (<name>)" into buf. */
static void ze_fail(char *buf, size_t n, const char *prefix, const char *call, ze_result_t r)
{
    kern_say(buf, n, "%s%s failed: 0x%08x (%s)", prefix, call, (unsigned)r, ze_err_name(r));
}

/* Opens libze_loader and resolves ZE_FUNCS; 0, or -1 with ZE.why. */
static int ze_open(void)
{
    void *h = kern_dlopen_first((const char *const[]){ "libze_loader.so.1", "libze_loader.so", NULL });
    if (!h) {
        kern_say(ZE.why, sizeof ZE.why, "libze_loader not found");
        return -1;
    }
#define X(ret, name, params)                                                  \
    if (!(ZE.name = (ret(*) params)dlsym(h, #name))) {                        \
        kern_say(ZE.why, sizeof ZE.why, "libze_loader has no " #name);             \
        return -1;                                                            \
    }
    ZE_FUNCS(X)
#undef X
    return 0;
}

/* The first GPU of driver d, into ZE.driver/ZE.dev; 0 or -1. */
static int ze_pick_in(ze_driver_handle_t d)
{
    ze_device_handle_t devs[16];
    uint32_t nd = 16;
    if (ZE.zeDeviceGet(d, &nd, devs) != ZE_RESULT_SUCCESS)
        return -1;
    for (uint32_t i = 0; i < nd && i < 16; i++) {
        ze_device_properties_t props = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
        if (ZE.zeDeviceGetProperties(devs[i], &props) == ZE_RESULT_SUCCESS && props.type == ZE_DEVICE_TYPE_GPU) {
            ZE.driver = d;
            ZE.dev = devs[i];
            return 0;
        }
    }
    return -1;
}

/* zeInit, then the first driver with a GPU; 0 or -1 with ZE.why. */
static int ze_pick_device(void)
{
    ze_result_t r = ZE.zeInit(ZE_INIT_FLAG_GPU_ONLY);
    if (r != ZE_RESULT_SUCCESS) {
        kern_say(ZE.why, sizeof ZE.why, "zeInit failed: 0x%08x (%s)", (unsigned)r,
            r == ZE_RESULT_ERROR_UNINITIALIZED ? "no Level Zero driver" : ze_err_name(r));
        return -1;
    }
    ze_driver_handle_t drivers[16];
    uint32_t n = 16;
    if ((r = ZE.zeDriverGet(&n, drivers)) != ZE_RESULT_SUCCESS)
        return ze_fail(ZE.why, sizeof ZE.why, "", "zeDriverGet", r), -1;
    for (uint32_t i = 0; i < n && i < 16; i++)
        if (ze_pick_in(drivers[i]) == 0)
            return 0;
    kern_say(ZE.why, sizeof ZE.why, "no Level Zero GPU device");
    return -1;
}

/* The ordinal of ZE.dev's first compute queue group; -1 with ZE.why if none. */
static int64_t ze_compute_ordinal(void)
{
    ze_command_queue_group_properties_t g[16];
    uint32_t n = 16;
    for (int i = 0; i < 16; i++)
        g[i] = (ze_command_queue_group_properties_t){.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES};
    ze_result_t r = ZE.zeDeviceGetCommandQueueGroupProperties(ZE.dev, &n, g);
    if (r != ZE_RESULT_SUCCESS)
        return ze_fail(ZE.why, sizeof ZE.why, "", "zeDeviceGetCommandQueueGroupProperties", r), -1;
    for (uint32_t i = 0; i < n && i < 16; i++)
        if (g[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE)
            return i;
    kern_say(ZE.why, sizeof ZE.why, "the Level Zero GPU has no compute queue group");
    return -1;
}

/* The context and the synchronous immediate command list; 0 or -1 with ZE.why. */
static int ze_make_context(void)
{
    ze_context_desc_t cd = {.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC};
    ze_result_t r = ZE.zeContextCreate(ZE.driver, &cd, &ZE.ctx);
    if (r != ZE_RESULT_SUCCESS)
        return ze_fail(ZE.why, sizeof ZE.why, "", "zeContextCreate", r), -1;
    int64_t ordinal = ze_compute_ordinal();
    if (ordinal < 0)
        return -1;
    ze_command_queue_desc_t qd = {
        .stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
        .ordinal = (uint32_t)ordinal,
        .mode = ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS,
        .priority = ZE_COMMAND_QUEUE_PRIORITY_NORMAL,
    };
    r = ZE.zeCommandListCreateImmediate(ZE.ctx, ZE.dev, &qd, &ZE.list);
    if (r != ZE_RESULT_SUCCESS)
        return ze_fail(ZE.why, sizeof ZE.why, "", "zeCommandListCreateImmediate", r), -1;
    if (pthread_mutex_init(&ZE.launch_mu, NULL) != 0)
        return kern_say(ZE.why, sizeof ZE.why, "pthread_mutex_init failed"), -1;
    return 0;
}

/* Writes ZE.text: the device's name and the driver's API version. */
static void ze_describe(void)
{
    ze_device_properties_t props = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
    ze_api_version_t v = 0;
    if (ZE.zeDeviceGetProperties(ZE.dev, &props) != ZE_RESULT_SUCCESS)
        snprintf(props.name, sizeof props.name, "?");
    props.name[sizeof props.name - 1] = 0;
    ZE.zeDriverGetApiVersion(ZE.driver, &v);
    kern_say(ZE.text, sizeof ZE.text, "%s (Level Zero %u.%u)", props.name, (unsigned)(v >> 16), (unsigned)(v & 0xffff));
}

/* smelt's plans hand kernels host memory (torch's CPU tensors, the
 * arena, the error flag): the device must reach system allocations
 * (sharedSystemAllocCapabilities). Also reads fp64 support. 0 or -1 with ZE.why. */
static int ze_check_device(void)
{
    ze_device_memory_access_properties_t ma = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_ACCESS_PROPERTIES};
    ze_result_t r = ZE.zeDeviceGetMemoryAccessProperties(ZE.dev, &ma);
    if (r != ZE_RESULT_SUCCESS)
        return ze_fail(ZE.why, sizeof ZE.why, "", "zeDeviceGetMemoryAccessProperties", r), -1;
    if (!ma.sharedSystemAllocCapabilities)
        return kern_say(ZE.why, sizeof ZE.why, "the Level Zero GPU cannot reach host memory (no shared system "
                                          "allocations) and smelt's plans pass CPU tensors"), -1;
    ze_device_module_properties_t mp = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES};
    ZE.fp64 = ZE.zeDeviceGetModuleProperties(ZE.dev, &mp) == ZE_RESULT_SUCCESS && mp.fp64flags != 0;
    return 0;
}

static void ze_init(void)
{
    if (ze_open() || ze_pick_device() || ze_check_device() || ze_make_context())
        return;
    ze_describe();
    ZE.ok = 1;
}

int kern_ze_available(char *why, size_t n)
{
    pthread_once(&ze_once, ze_init);
    if (!ZE.ok)
        kern_say(why, n, "%s", ZE.why);
    return ZE.ok;
}

int kern_ze_fp64(void)
{
    return kern_ze_available(NULL, 0) && ZE.fp64;
}

const char *kern_ze_device_text(void)
{
    return kern_ze_available(NULL, 0) ? ZE.text : NULL;
}

/* 1 if available, else 0 with "Level Zero unavailable: <reason>" in err. */
static int ze_ready(char *err, size_t errlen)
{
    if (kern_ze_available(NULL, 0))
        return 1;
    kern_say(err, errlen, "Level Zero unavailable: %s", ZE.why);
    return 0;
}

/* Appends the build log behind log (whitespace-trimmed) to err and
 * destroys log. */
static void ze_append_log(ze_module_build_log_handle_t log, char *err, size_t errlen)
{
    size_t len = 0, used = err ? strlen(err) : 0;
    char *text = NULL;
    if (err && used + 1 < errlen && ZE.zeModuleBuildLogGetString(log, &len, NULL) == ZE_RESULT_SUCCESS && len > 1 &&
        (text = malloc(len + 1)) && ZE.zeModuleBuildLogGetString(log, &len, text) == ZE_RESULT_SUCCESS) {
        text[len] = 0;
        while (len && (text[len - 1] == '\n' || text[len - 1] == ' ' || text[len - 1] == '\0'))
            text[--len] = 0;
        kern_say(err + used, errlen - used, "; build log:\n%s", text);
    }
    free(text);
    ZE.zeModuleBuildLogDestroy(log);
}

kern_ze_module *kern_ze_module_new(const void *spirv, size_t nbytes, char *err, size_t errlen)
{
    if (!ze_ready(err, errlen))
        return NULL;
    if (!spirv || !nbytes)
        return kern_say(err, errlen, "kern_ze_module_new: empty module"), NULL;
    ze_module_desc_t md = {
        .stype = ZE_STRUCTURE_TYPE_MODULE_DESC,
        .format = ZE_MODULE_FORMAT_IL_SPIRV,
        .inputSize = nbytes,
        .pInputModule = spirv,
        .pBuildFlags = "-ze-opt-greater-than-4GB-buffer-required",   /* tensors may exceed 4 GB */
    };
    ze_module_handle_t mod = NULL;
    ze_module_build_log_handle_t log = NULL;
    ze_result_t r = ZE.zeModuleCreate(ZE.ctx, ZE.dev, &md, &mod, &log);
    if (r != ZE_RESULT_SUCCESS) {
        ze_fail(err, errlen, "", "zeModuleCreate", r);
        if (log)
            ze_append_log(log, err, errlen);
        return NULL;
    }
    if (log)
        ZE.zeModuleBuildLogDestroy(log);
    kern_ze_module *m = malloc(sizeof *m);
    if (!m) {
        ZE.zeModuleDestroy(mod);
        return kern_say(err, errlen, "out of memory"), NULL;
    }
    m->mod = mod;
    return m;
}

void kern_ze_module_free(kern_ze_module *m)
{
    if (!m)
        return;
    ZE.zeModuleDestroy(m->mod);
    free(m);
}

kern_ze_kernel *kern_ze_kernel_new(kern_ze_module *m, const char *name, char *err, size_t errlen)
{
    if (!ze_ready(err, errlen))
        return NULL;
    if (!m || !name)
        return kern_say(err, errlen, "kern_ze_kernel_new: no module or no name"), NULL;
    kern_ze_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return kern_say(err, errlen, "out of memory"), NULL;
    snprintf(k->name, sizeof k->name, "%s", name);
    ze_kernel_desc_t kd = {.stype = ZE_STRUCTURE_TYPE_KERNEL_DESC, .pKernelName = name};
    ze_kernel_properties_t props = {.stype = ZE_STRUCTURE_TYPE_KERNEL_PROPERTIES};
    const char *call = "zeKernelCreate";
    ze_result_t r = ZE.zeKernelCreate(m->mod, &kd, &k->kern);
    if (r == ZE_RESULT_SUCCESS && (r = ZE.zeKernelGetProperties(k->kern, &props)) != ZE_RESULT_SUCCESS) {
        call = "zeKernelGetProperties";
        ZE.zeKernelDestroy(k->kern);
    }
    if (r != ZE_RESULT_SUCCESS) {
        kern_say(err, errlen, "kernel %s: %s failed: 0x%08x (%s)", name, call, (unsigned)r, ze_err_name(r));
        free(k);
        return NULL;
    }
    k->nargs = props.numKernelArgs;
    return k;
}

void kern_ze_kernel_free(kern_ze_kernel *k)
{
    if (!k)
        return;
    ZE.zeKernelDestroy(k->kern);
    free(k);
}

/* Sets k's group size (if changed) and arguments and appends the launch
 * to the synchronous list, which returns when the kernel is done. Called
 * under ZE.launch_mu. *call names the failing call. */
static ze_result_t ze_run(kern_ze_kernel *k, int nargs, void *const *args, uint32_t groups, uint32_t local,
                          const char **call)
{
    ze_result_t r = ZE_RESULT_SUCCESS;
    if (k->local != local) {
        *call = "zeKernelSetGroupSize";
        if ((r = ZE.zeKernelSetGroupSize(k->kern, local, 1, 1)) != ZE_RESULT_SUCCESS)
            return r;
        k->local = local;
    }
    *call = "zeKernelSetArgumentValue";
    for (int i = 0; i < nargs && r == ZE_RESULT_SUCCESS; i++)
        r = ZE.zeKernelSetArgumentValue(k->kern, (uint32_t)i, sizeof(void *), &args[i]);
    if (r != ZE_RESULT_SUCCESS)
        return r;
    ze_group_count_t count = {groups, 1, 1};
    *call = "zeCommandListAppendLaunchKernel";
    return ZE.zeCommandListAppendLaunchKernel(ZE.list, k->kern, &count, NULL, 0, NULL);
}

int kern_ze_launch(kern_ze_kernel *k, int nargs, void *const *args, int64_t groups, int64_t local,
                   char *err, size_t errlen)
{
    if (groups == 0)
        return 0;
    if (!k || groups < 0 || groups > UINT32_MAX || local < 1 || local > UINT32_MAX)
        return kern_say(err, errlen, "kern_ze_launch: bad range (%lld groups of %lld)", (long long)groups,
                   (long long)local), -1;
    if (nargs != (int)k->nargs || (nargs > 0 && !args))
        return kern_say(err, errlen, "kernel %s: %d arguments given, it takes %u", k->name, nargs,
                   (unsigned)k->nargs), -1;
    const char *call = "?";
    pthread_mutex_lock(&ZE.launch_mu);
    ze_result_t r = ze_run(k, nargs, args, (uint32_t)groups, (uint32_t)local, &call);
    pthread_mutex_unlock(&ZE.launch_mu);
    if (r == ZE_RESULT_SUCCESS)
        return 0;
    kern_say(err, errlen, "kernel %s: %s failed: 0x%08x (%s)", k->name, call, (unsigned)r, ze_err_name(r));
    return -1;
}

void *kern_ze_alloc_shared(size_t nbytes, char *err, size_t errlen)
{
    if (!ze_ready(err, errlen))
        return NULL;
    if (!nbytes)
        return kern_say(err, errlen, "kern_ze_alloc_shared: 0 bytes"), NULL;
    ze_device_mem_alloc_desc_t dd = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
    ze_host_mem_alloc_desc_t hd = {.stype = ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC};
    void *p = NULL;
    ze_result_t r = ZE.zeMemAllocShared(ZE.ctx, &dd, &hd, nbytes, 64, ZE.dev, &p);
    if (r != ZE_RESULT_SUCCESS || !p)
        return ze_fail(err, errlen, "", "zeMemAllocShared", r), NULL;
    return p;
}

void kern_ze_free(void *p)
{
    if (p && kern_ze_available(NULL, 0))
        ZE.zeMemFree(ZE.ctx, p);
}
