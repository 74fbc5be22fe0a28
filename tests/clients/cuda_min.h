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
/* CUmemAllocationType */
enum { CU_MEM_ALLOCATION_TYPE_PINNED = 1 };
/* CUmemAttach_flags */
enum { CU_MEM_ATTACH_GLOBAL = 1 };
/* cuGetProcAddress flags and query results */
enum { CU_GET_PROC_ADDRESS_DEFAULT = 0, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2 };
enum { CU_GET_PROC_ADDRESS_SUCCESS = 0 };

typedef struct {
    int type;
    int id;
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
typedef CUresult (*fn_cuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                      size_t count);
typedef CUresult (*fn_cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle *handle,
                                                   void *addr);
typedef CUresult (*fn_cuMemExportToShareableHandle)(void *shareable,
                                                    CUmemGenericAllocationHandle handle,
                                                    int type, unsigned long long flags);
typedef CUresult (*fn_cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *handle,
                                                      void *os_handle, int type);
/* CUipcMemHandle */
typedef struct {
    char reserved[64];
} CUipcMemHandle;
typedef CUresult (*fn_cuIpcOpenMemHandle)(CUdeviceptr *dptr, CUipcMemHandle handle,
                                          unsigned int flags);
typedef CUresult (*fn_cuMemPoolImportPointer)(CUdeviceptr *dptr, CUmemoryPool pool, void *data);
typedef CUresult (*fn_cuExternalMemoryGetMappedBuffer)(CUdeviceptr *dptr, void *memory,
                                                       const void *desc);
#ifdef CUDA_MIN_EXTERN
extern CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle,
                                      unsigned int flags);
extern CUresult cuMemPoolImportPointer(CUdeviceptr *dptr, CUmemoryPool pool, void *data);
extern CUresult cuExternalMemoryGetMappedBuffer(CUdeviceptr *dptr, void *memory,
                                                const void *desc);
extern CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                               size_t count);
extern CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr);
extern CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                             int type, unsigned long long flags);
extern CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                               void *os_handle, int type);
#endif

/* Function-pointer types, one per entry point used. */
typedef CUresult (*fn_cuInit)(unsigned int flags);
typedef CUresult (*fn_cuDeviceGet)(CUdevice *dev, int ordinal);
typedef CUresult (*fn_cuDeviceGetCount)(int *count);
typedef CUresult (*fn_cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
typedef CUresult (*fn_cuCtxSetCurrent)(CUcontext ctx);
typedef CUresult (*fn_cuCtxGetCurrent)(CUcontext *ctx);
typedef CUresult (*fn_cuMemAlloc_v2)(CUdeviceptr *dptr, size_t bytes);
typedef CUresult (*fn_cuMemFree_v2)(CUdeviceptr dptr);
typedef CUresult (*fn_cuMemAllocPitch_v2)(CUdeviceptr *dptr, size_t *pitch, size_t width,
                                          size_t height, unsigned int elem);
typedef CUresult (*fn_cuMemAllocManaged)(CUdeviceptr *dptr, size_t bytes, unsigned int flags);
typedef CUresult (*fn_cuMemAllocAsync)(CUdeviceptr *dptr, size_t bytes, CUstream stream);
typedef CUresult (*fn_cuMemAllocFromPoolAsync)(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                               CUstream stream);
typedef CUresult (*fn_cuMemFreeAsync)(CUdeviceptr dptr, CUstream stream);
typedef CUresult (*fn_cuMemPoolCreate)(CUmemoryPool *pool, const CUmemPoolProps *props);
typedef CUresult (*fn_cuDeviceGetDefaultMemPool)(CUmemoryPool *pool, CUdevice dev);
typedef CUresult (*fn_cuMemCreate)(CUmemGenericAllocationHandle *handle, size_t size,
                                   const CUmemAllocationProp *prop, unsigned long long flags);
typedef CUresult (*fn_cuMemRelease)(CUmemGenericAllocationHandle handle);
typedef CUresult (*fn_cuMemAddressReserve)(CUdeviceptr *ptr, size_t size, size_t alignment,
                                           CUdeviceptr addr, unsigned long long flags);
typedef CUresult (*fn_cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset,
                                CUmemGenericAllocationHandle handle, unsigned long long flags);
typedef CUresult (*fn_cuMemUnmap)(CUdeviceptr ptr, size_t size);
typedef CUresult (*fn_cuMemAddressFree)(CUdeviceptr ptr, size_t size);
typedef CUresult (*fn_cuMemGetInfo_v2)(size_t *free_bytes, size_t *total_bytes);
typedef CUresult (*fn_cuDeviceTotalMem_v2)(size_t *bytes, CUdevice dev);
/* The legacy unversioned entry points with 32-bit sizes and pointers. */
typedef CUresult (*fn_cuMemAlloc_v1)(CUdeviceptr_v1 *dptr, unsigned int bytes);
typedef CUresult (*fn_cuMemFree_v1)(CUdeviceptr_v1 dptr);
typedef CUresult (*fn_cuMemGetInfo_v1)(unsigned int *free_bytes, unsigned int *total_bytes);
typedef CUresult (*fn_cuGetErrorName)(CUresult error, const char **name);
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
typedef CUresult (*fn_cuArrayCreate_v2)(CUarray *array, const CUDA_ARRAY_DESCRIPTOR *desc);
typedef CUresult (*fn_cuArray3DCreate_v2)(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc);
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
typedef CUresult (*fn_cuArrayCreate_v1)(CUarray *array, const CUDA_ARRAY_DESCRIPTOR_v1 *desc);
typedef CUresult (*fn_cuArray3DCreate_v1)(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc);
typedef CUresult (*fn_cuArrayDestroy)(CUarray array);
typedef CUresult (*fn_cuMipmappedArrayCreate)(CUmipmappedArray *array,
                                              const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                              unsigned int levels);
typedef CUresult (*fn_cuMipmappedArrayDestroy)(CUmipmappedArray array);
typedef CUresult (*fn_cuMipmappedArrayGetLevel)(CUarray *level_array, CUmipmappedArray array,
                                                unsigned int level);
typedef CUresult (*fn_cuArrayGetMemoryRequirements)(CUDA_ARRAY_MEMORY_REQUIREMENTS *req,
                                                    CUarray array, CUdevice dev);
typedef CUresult (*fn_cuMipmappedArrayGetMemoryRequirements)(CUDA_ARRAY_MEMORY_REQUIREMENTS *req,
                                                             CUmipmappedArray array,
                                                             CUdevice dev);

/* Placement, contexts, capture (issue 10). */
typedef CUresult (*fn_cuCtxDestroy_v2)(CUcontext ctx);
typedef CUresult (*fn_cuDevicePrimaryCtxReset_v2)(CUdevice dev);
typedef CUresult (*fn_cuDevicePrimaryCtxRelease_v2)(CUdevice dev);
typedef CUresult (*fn_cuCtxCreate_v2)(CUcontext *ctx, unsigned int flags, CUdevice dev);
typedef CUresult (*fn_cuStreamBeginCapture_v2)(CUstream stream, int mode);
typedef CUresult (*fn_cuStreamEndCapture)(CUstream stream, void **graph);
typedef CUresult (*fn_cuMemGetDefaultMemPool)(CUmemoryPool *pool, CUmemLocation *location,
                                              int type); /* CUDA 13 */
/* The shim's test helper (not part of CUDA). */
typedef int (*fn_cuShimStats)(int dev, size_t *in_use, size_t *peak, unsigned long long *live);

/* The exported symbols, for clients linked with -lcuda. The legacy unversioned ones are
 * weak: a driver without them leaves their address NULL instead of failing the link. */
#ifdef CUDA_MIN_EXTERN
extern CUresult cuInit(unsigned int flags);
extern CUresult cuDeviceGet(CUdevice *dev, int ordinal);
extern CUresult cuDeviceGetCount(int *count);
extern CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
extern CUresult cuCtxSetCurrent(CUcontext ctx);
extern CUresult cuCtxGetCurrent(CUcontext *ctx);
extern CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes);
extern CUresult cuMemFree_v2(CUdeviceptr dptr);
extern CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                   unsigned int elem);
extern CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags);
extern CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream stream);
extern CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                        CUstream stream);
extern CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
extern CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props);
extern CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev);
extern CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags);
extern CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
extern CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                    CUdeviceptr addr, unsigned long long flags);
extern CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long flags);
extern CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
extern CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
extern CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes);
extern CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
extern CUresult cuGetErrorName(CUresult error, const char **name);
/* arrays */
extern CUresult cuArrayCreate_v2(CUarray *array, const CUDA_ARRAY_DESCRIPTOR *desc);
extern CUresult cuArray3DCreate_v2(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc);
extern CUresult cuArrayDestroy(CUarray array);
extern CUresult cuMipmappedArrayCreate(CUmipmappedArray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                       unsigned int levels);
extern CUresult cuMipmappedArrayDestroy(CUmipmappedArray array);
extern CUresult cuArrayCreate(CUarray *array, const CUDA_ARRAY_DESCRIPTOR_v1 *desc)
    __attribute__((weak));
extern CUresult cuArray3DCreate(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc)
    __attribute__((weak));
/* Placement, contexts, capture (issue 10). */
extern CUresult cuCtxDestroy_v2(CUcontext ctx);
extern CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
extern CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
extern CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool, CUmemLocation *location, int type);
extern CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytes) __attribute__((weak));
extern CUresult cuMemFree(CUdeviceptr_v1 dptr) __attribute__((weak));
extern CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total_bytes)
    __attribute__((weak));
#endif

/* ---- issue 11: pools that keep memory, graph memory ---- */
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
typedef CUresult (*fn_cuMemPoolTrimTo)(CUmemoryPool pool, size_t keep);
typedef CUresult (*fn_cuMemPoolGetAttribute)(CUmemoryPool pool, int attr, void *value);
typedef CUresult (*fn_cuMemPoolSetAttribute)(CUmemoryPool pool, int attr, void *value);
typedef CUresult (*fn_cuGraphCreate)(CUgraph *graph, unsigned int flags);
typedef CUresult (*fn_cuGraphDestroy)(CUgraph graph);
typedef CUresult (*fn_cuGraphAddMemAllocNode)(CUgraphNode *node, CUgraph graph,
                                              const CUgraphNode *deps, size_t ndeps,
                                              CUDA_MEM_ALLOC_NODE_PARAMS *params);
typedef CUresult (*fn_cuGraphAddMemFreeNode)(CUgraphNode *node, CUgraph graph,
                                             const CUgraphNode *deps, size_t ndeps,
                                             CUdeviceptr dptr);
typedef CUresult (*fn_cuGraphInstantiateWithFlags)(CUgraphExec *exec, CUgraph graph,
                                                   unsigned long long flags);
typedef CUresult (*fn_cuGraphInstantiateWithParams)(CUgraphExec *exec, CUgraph graph,
                                                    CUDA_GRAPH_INSTANTIATE_PARAMS *params);
typedef CUresult (*fn_cuGraphUpload)(CUgraphExec exec, CUstream stream);
typedef CUresult (*fn_cuGraphLaunch)(CUgraphExec exec, CUstream stream);
typedef CUresult (*fn_cuGraphExecDestroy)(CUgraphExec exec);
typedef CUresult (*fn_cuDeviceGraphMemTrim)(CUdevice dev);
typedef CUresult (*fn_cuDeviceGetGraphMemAttribute)(CUdevice dev, int attr, void *value);
typedef CUresult (*fn_cuGraphGetNodes)(CUgraph graph, CUgraphNode *nodes, size_t *count);
typedef CUresult (*fn_cuGraphNodeGetType)(CUgraphNode node, int *type);
typedef CUresult (*fn_cuCtxSynchronize)(void);
typedef CUresult (*fn_cuStreamSynchronize)(CUstream stream);
/* The shim's test helper (not part of CUDA). */
typedef int (*fn_cuShimFootprint)(int dev, size_t *allocations, size_t *pool_cache,
                                  size_t *graph, size_t *context);
#ifdef CUDA_MIN_EXTERN
extern CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep);
extern CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value);
extern CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value);
extern CUresult cuGraphCreate(CUgraph *graph, unsigned int flags);
extern CUresult cuGraphDestroy(CUgraph graph);
extern CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                                       size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *params);
extern CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                                      size_t ndeps, CUdeviceptr dptr);
extern CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph,
                                            unsigned long long flags);
extern CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph graph,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS *params);
extern CUresult cuGraphUpload(CUgraphExec exec, CUstream stream);
extern CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream);
extern CUresult cuGraphExecDestroy(CUgraphExec exec);
extern CUresult cuDeviceGraphMemTrim(CUdevice dev);
extern CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, int attr, void *value);
#endif

#endif
