/* The slice of the CUDA driver API that cuquota's test clients use.
 *
 * Our own minimal declarations, written from the documented ABI (types, struct layouts,
 * values); not a copy of NVIDIA's header. */
#ifndef CUQUOTA_CUDA_MIN_H
#define CUQUOTA_CUDA_MIN_H

#include <stddef.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;    /* 64-bit hosts */
typedef unsigned int CUdeviceptr_v1;       /* the legacy 32-bit form */
typedef int CUdevice;
typedef struct cuquota_ctx_opaque *CUcontext;
typedef struct cuquota_stream_opaque *CUstream;
typedef struct cuquota_pool_opaque *CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef unsigned long long cuuint64_t;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};

/* CUmemLocationType */
enum { CU_MEM_LOCATION_TYPE_DEVICE = 1, CU_MEM_LOCATION_TYPE_HOST = 2 };
enum { CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN = 6 };
/* CUmemAllocationType */
enum { CU_MEM_ALLOCATION_TYPE_PINNED = 1 };
/* CUmemAttach_flags */
enum { CU_MEM_ATTACH_GLOBAL = 1 };
/* cuGetProcAddress flags and query results */
enum { CU_GET_PROC_ADDRESS_DEFAULT = 0, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2 };
enum { CU_GET_PROC_ADDRESS_SUCCESS = 0 };

/* CUmemLocation: the id is a union with CUDA 13.4's `localized` device and locality domain
 * (for CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN). */
typedef struct {
    int type;
    union {
        int id;
        struct {
            unsigned char deviceId;
            unsigned char localityDomainId;
        } localized;
    };
} CUmemLocation;

/* CUmemAllocationProp (v1): 32 bytes on LP64. */
typedef struct {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    unsigned char allocFlags[8];
} CUmemAllocationProp;

/* CUmemPoolProps (v1). */
typedef struct {
    int allocType;
    int handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

/* ---- VMM lifetimes and imports ---- */
/* CUmemAllocationHandleType, CUmemAccess_flags */
enum { CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1 };
enum { CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 };
/* CUmemAccessDesc */
typedef struct {
    CUmemLocation location;
    int flags;
} CUmemAccessDesc;
/* CUipcMemHandle */
typedef struct {
    char reserved[64];
} CUipcMemHandle;
/* cuGetProcAddress, which the runtime client resolves with dlsym. */
typedef CUresult (*fn_cuGetProcAddress_v2)(const char *symbol, void **pfn, int cuda_version,
                                           cuuint64_t flags, int *symbol_status);
typedef CUresult (*fn_cuGetProcAddress_v1)(const char *symbol, void **pfn, int cuda_version,
                                           cuuint64_t flags);
/* ---- CUDA arrays ---- */
typedef struct cuquota_array_opaque *CUarray;
typedef struct cuquota_mipmapped_array_opaque *CUmipmappedArray;
/* CUDA_ARRAY_DESCRIPTOR_v2 */
typedef struct {
    size_t Width;
    size_t Height;
    int Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;
/* CUDA_ARRAY3D_DESCRIPTOR_v2 */
typedef struct {
    size_t Width;
    size_t Height;
    size_t Depth;
    int Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;
/* CUDA_ARRAY_MEMORY_REQUIREMENTS_v1 */
typedef struct {
    size_t size;
    size_t alignment;
    unsigned int reserved[4];
} CUDA_ARRAY_MEMORY_REQUIREMENTS;
/* The legacy descriptors (32-bit dimensions) of cuArrayCreate / cuArray3DCreate. */
typedef struct {
    unsigned int Width;
    unsigned int Height;
    int Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR_v1;
typedef struct {
    unsigned int Width;
    unsigned int Height;
    unsigned int Depth;
    int Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR_v1;
typedef CUresult (*fn_cuMipmappedArrayGetLevel)(CUarray *level_array, CUmipmappedArray array,
                                                unsigned int level);
typedef CUresult (*fn_cuArrayGetMemoryRequirements)(CUDA_ARRAY_MEMORY_REQUIREMENTS *req,
                                                    CUarray array, CUdevice dev);
typedef CUresult (*fn_cuMipmappedArrayGetMemoryRequirements)(CUDA_ARRAY_MEMORY_REQUIREMENTS *req,
                                                             CUmipmappedArray array,
                                                             CUdevice dev);

/* Placement, contexts (capture's functions are in driver_functions.h). */
/* The shim's test helper (not part of CUDA). */
typedef int (*fn_cuShimStats)(int dev, size_t *in_use, size_t *peak, unsigned long long *live);

/* ---- Context memory, cuCtxSetLimit, NVML (layouts as nvml.h has them) ---- */
typedef CUresult (*fn_cuCtxCreate_v3)(CUcontext *ctx, void *params, int num_params,
                                      unsigned int flags, CUdevice dev);
typedef CUresult (*fn_cuCtxCreate_v4)(CUcontext *ctx, void *params, unsigned int flags,
                                      CUdevice dev);
typedef CUresult (*fn_cuCtxGetLimit)(size_t *value, int limit);
typedef CUresult (*fn_cuDeviceGetUuid)(unsigned char uuid[16], CUdevice dev);
typedef CUresult (*fn_cuDeviceGetPCIBusId)(char *id, int len, CUdevice dev);
typedef int (*fn_cuShimOtherProcess)(int nvml_index, unsigned int pid, size_t bytes);
typedef void *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef int (*fn_nvmlInit_v2)(void);
typedef int (*fn_nvmlShutdown)(void);
typedef int (*fn_nvmlDeviceGetCount_v2)(unsigned int *count);
typedef int (*fn_nvmlDeviceGetHandleByIndex_v2)(unsigned int index, nvmlDevice_t *device);
typedef int (*fn_nvmlDeviceGetMemoryInfo)(nvmlDevice_t device, nvmlMemory_t *memory);
typedef int (*fn_nvmlDeviceGetMemoryInfo_v2)(nvmlDevice_t device, nvmlMemory_v2_t *memory);
typedef int (*fn_nvmlDeviceGetComputeRunningProcesses_v3)(nvmlDevice_t device,
                                                          unsigned int *count,
                                                          nvmlProcessInfo_t *infos);
typedef int (*fn_nvmlDeviceGetUUID)(nvmlDevice_t device, char *uuid, unsigned int length);
typedef int (*fn_nvmlDeviceGetPciInfo_v3)(nvmlDevice_t device, nvmlPciInfo_t *pci);

/* CUarrayMapInfo (v1): 96 bytes on LP64; the subresource union as its 32 bytes. */
typedef struct {
    int resourceType; /* CU_RESOURCE_TYPE_ARRAY = 0, _MIPMAPPED_ARRAY = 1 */
    void *resource;   /* the CUarray or CUmipmappedArray */
    int subresourceType;
    unsigned long long subresource[4];
    int memOperationType; /* CU_MEM_OPERATION_TYPE_MAP = 1, _UNMAP = 2 */
    int memHandleType;    /* CU_MEM_HANDLE_TYPE_GENERIC = 0 */
    CUmemGenericAllocationHandle memHandle;
    unsigned long long offset;
    unsigned int deviceBitMask, flags, reserved[2];
} CUarrayMapInfo;

/* ---- Pools that keep memory, graph memory ---- */
typedef struct cuquota_graph_opaque *CUgraph;
typedef struct cuquota_graph_node_opaque *CUgraphNode;
typedef struct cuquota_graph_exec_opaque *CUgraphExec;
/* CUDA_MEM_ALLOC_NODE_PARAMS (v1): 120 bytes */
typedef struct {
    CUmemPoolProps poolProps;
    const CUmemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;
/* CUDA_GRAPH_INSTANTIATE_PARAMS */
typedef struct {
    cuuint64_t flags;
    CUstream hUploadStream;
    CUgraphNode hErrNode_out;
    int result_out;
} CUDA_GRAPH_INSTANTIATE_PARAMS;
/* Stream capture: CUstreamCigParam and CUstreamCigCaptureParams (CIG, CUDA 13.1). */
typedef struct {
    int streamSharedDataType;
    void *streamSharedData;
} CUstreamCigParam;
typedef struct {
    CUstreamCigParam *streamCigParams;
} CUstreamCigCaptureParams;
/* Green contexts: CUdevResource as RESOURCE_ABI_VERSION 1 lays it out (144 bytes). */
typedef struct cuquota_green_opaque *CUgreenCtx;
typedef struct cuquota_resource_desc_opaque *CUdevResourceDesc;
typedef struct CUdevResource_st {
    int type;
    unsigned char internal_padding[92];
    union {
        struct {
            unsigned int smCount, minSmPartitionSize, smCoscheduledAlignment, flags,
                localityDomainId;
        } sm;
        unsigned char oversize[40];
    };
    struct CUdevResource_st *nextResource;
} CUdevResource;
typedef CUresult (*fn_cuGraphGetNodes)(CUgraph graph, CUgraphNode *nodes, size_t *count);
typedef CUresult (*fn_cuGraphNodeGetType)(CUgraphNode node, int *type);
typedef CUresult (*fn_cuCtxSynchronize)(void);
typedef CUresult (*fn_cuStreamSynchronize)(CUstream stream);
/* The shim's test helper (not part of CUDA). */
typedef int (*fn_cuShimFootprint)(int dev, size_t *allocations, size_t *pool_cache,
                                  size_t *graph, size_t *context);

/* The driver functions of struct drv (ops.h), from driver_functions.h: a pointer type
 * fn_NAME for each (fn_NAME_v1 for the legacy ones), and the exported symbols for clients
 * linked with -lcuda. The legacy ones are weak: a driver without them leaves their address
 * NULL instead of failing the link. */
#include "driver_functions.h"
#define DRV(name, base, version, params) typedef CUresult(*fn_##name) params;
#define DRV_LEGACY(name, base, version, params) typedef CUresult(*fn_##name##_v1) params;
DRIVER_FUNCTIONS
#undef DRV
#undef DRV_LEGACY
#ifdef CUDA_MIN_EXTERN
#define DRV(name, base, version, params) extern CUresult name params;
#define DRV_LEGACY(name, base, version, params) extern CUresult name params __attribute__((weak));
DRIVER_FUNCTIONS
#undef DRV
#undef DRV_LEGACY
#endif

#endif
