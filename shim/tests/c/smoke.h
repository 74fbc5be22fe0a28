/* What the smoke scenarios share: the few driver API types and functions they call (no
 * NVIDIA headers), the shim's own test functions, the CHECK macros and the scenarios, one
 * per file by what they exercise (smoke_devices.c, smoke_vmm_pools.c, smoke_footprint.c). */
#ifndef SHIM_SMOKE_H
#define SHIM_SMOKE_H

#include <stddef.h>
#include <stdio.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUstream, *CUevent, *CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { int type, id; } CUmemLocation;
typedef struct {
    int type, requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    unsigned char allocFlags[8];
} CUmemAllocationProp;
typedef struct { CUmemLocation location; int flags; } CUmemAccessDesc;
typedef struct {
    int allocType, handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

CUresult cuInit(unsigned);
CUresult cuDriverGetVersion(int *);
CUresult cuGetErrorName(CUresult, const char **);
CUresult cuGetErrorString(CUresult, const char **);
CUresult cuGetExportTable(const void **, const void *);
CUresult cuGetProcAddress(const char *, void **, int, unsigned long long);
CUresult cuGetProcAddress_v2(const char *, void **, int, unsigned long long, int *);
CUresult cuDeviceGetCount(int *);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDeviceGetName(char *, int, CUdevice);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuDeviceTotalMem(unsigned *, CUdevice);
CUresult cuDeviceGetAttribute(int *, int, CUdevice);
CUresult cuDeviceGetPCIBusId(char *, int, CUdevice);
CUresult cuDeviceGetByPCIBusId(CUdevice *, const char *);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuDevicePrimaryCtxGetState(CUdevice, unsigned *, int *);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxGetCurrent(CUcontext *);
CUresult cuCtxPushCurrent_v2(CUcontext);
CUresult cuCtxPopCurrent_v2(CUcontext *);
CUresult cuCtxGetDevice(CUdevice *);
CUresult cuCtxSynchronize(void);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventElapsedTime(float *, CUevent, CUevent);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemGetInfo(unsigned *, unsigned *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAlloc(unsigned *, unsigned);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemFree(unsigned);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned);
CUresult cuMemGetAddressRange_v2(CUdeviceptr *, size_t *, CUdeviceptr);
CUresult cuMemHostAlloc(void **, size_t, unsigned);
CUresult cuMemFreeHost(void *);
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *, void *, unsigned);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuMemcpyDtoD_v2(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuMemsetD32_v2(CUdeviceptr, unsigned, size_t);
CUresult cuMemsetD8Async(CUdeviceptr, unsigned char, size_t, CUstream);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *, CUdevice);
CUresult cuDeviceGetMemPool(CUmemoryPool *, CUdevice);
CUresult cuDeviceSetMemPool(CUdevice, CUmemoryPool);
CUresult cuMemPoolCreate(CUmemoryPool *, const CUmemPoolProps *);
CUresult cuMemPoolDestroy(CUmemoryPool);
CUresult cuMemPoolSetAttribute(CUmemoryPool, int, void *);
CUresult cuMemPoolGetAttribute(CUmemoryPool, int, void *);
CUresult cuMemPoolSetAccess(CUmemoryPool, const CUmemAccessDesc *, size_t);
CUresult cuMemPoolGetAccess(int *, CUmemoryPool, CUmemLocation *);
CUresult cuStreamIsCapturing(CUstream, int *);
CUresult cuStreamIsCapturing_ptsz(CUstream, int *);
CUresult cuMemGetAllocationGranularity(size_t *, const CUmemAllocationProp *, int);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemAddressFree(CUdeviceptr, size_t);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *, CUmemGenericAllocationHandle);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *, void *);
CUresult cuEventSynchronize(CUevent);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice);
CUresult cuMemPoolTrimTo(CUmemoryPool, size_t);
/* graphs with memory nodes */
typedef void *CUgraph, *CUgraphNode, *CUgraphExec;
typedef struct {
    CUmemPoolProps poolProps;
    const CUmemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;
typedef struct {
    unsigned long long flags;
    CUstream hUploadStream;
    CUgraphNode hErrNode_out;
    int result_out;
} CUDA_GRAPH_INSTANTIATE_PARAMS;
CUresult cuGraphCreate(CUgraph *, unsigned);
CUresult cuGraphDestroy(CUgraph);
CUresult cuGraphAddMemAllocNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                CUDA_MEM_ALLOC_NODE_PARAMS *);
CUresult cuGraphMemAllocNodeGetParams(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS *);
CUresult cuGraphAddMemFreeNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr);
CUresult cuGraphMemFreeNodeGetParams(CUgraphNode, CUdeviceptr *);
CUresult cuGraphGetNodes(CUgraph, CUgraphNode *, size_t *);
CUresult cuGraphNodeGetType(CUgraphNode, int *);
CUresult cuGraphInstantiate(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long);
CUresult cuGraphInstantiateWithParams(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);
CUresult cuGraphUpload(CUgraphExec, CUstream);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuGraphExecDestroy(CUgraphExec);
CUresult cuDeviceGraphMemTrim(CUdevice);
CUresult cuDeviceGetGraphMemAttribute(CUdevice, int, void *);
CUresult cuDeviceSetGraphMemAttribute(CUdevice, int, void *);
CUresult cuStreamBeginCapture_v2(CUstream, int);
CUresult cuStreamEndCapture(CUstream, CUgraph *);
CUresult cuStreamBeginCapture_ptsz(CUstream);
CUresult cuStreamBeginCaptureToGraph(CUstream, CUgraph, const CUgraphNode *, const void *, size_t,
                                     int);
CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode, CUgraph *);
int cuShimFootprint(int, size_t *, size_t *, size_t *, size_t *);
int cuShimInjectFault(const char *, unsigned, unsigned);
int cuShimStats(int, size_t *, size_t *, unsigned long long *);

#include "check.h"

/* The shim's accounting of device dev: bytes in use, live allocations. */
size_t in_use(int dev);
unsigned long long live(int dev);
/* Makes device dev's primary context current. */
void use_primary(int dev);
/* The shim's own handle (dlopen RTLD_NOLOAD), for dlsym of its functions. */
void *libcuda(void);

/* smoke_devices.c */
void scenario_basic(void);
void scenario_proc_address(void);
void scenario_faults_env(void);
void scenario_faults_api(void);
void scenario_threads(void);
void scenario_bad_config(void);
void scenario_multi(void);
void scenario_interpose(void);
/* smoke_vmm_pools.c */
void scenario_vmm(void);
void scenario_pools(void);
/* smoke_footprint.c */
void scenario_pool_cache(void);
void scenario_pool_chunk(void);
void scenario_graphs(void);

#endif
